"""Sweeps on a cluster: a sweep's points as SLURM job-array tasks (submitit) or local processes.

- :mod:`.launch`: ``sparsecse sweep --launcher slurm|local`` (submit, wait, progress, resubmission)
- :mod:`.tasks`: what one task runs (one point, written as a one-process sweep writes it)
- :mod:`.config`: resources from options and a launcher config file
- :mod:`.slurm_status`: job states from ``squeue`` where the cluster has no accounting
- :mod:`.local_slurm`: start/stop a real single-node SLURM cluster on this machine

Only :mod:`.config` and :mod:`.local_slurm` work without submitit installed.
"""
