"""Sweeps on a cluster: a sweep's points as SLURM job-array tasks (submitit) or local processes.

- :mod:`.launch`: ``sparsecse sweep --launcher slurm|local`` (submit, wait, progress, resubmission)
- :mod:`.backends`: where tasks run (SLURM job arrays or local processes)
- :mod:`.tasks`: what one task runs (one point, written as a one-process sweep writes it)
- :mod:`.config`: resources from options and a launcher config file
- :mod:`.slurm_status`: job states from ``squeue`` where the cluster has no accounting

Only :mod:`.config` works without submitit installed (a single-node SLURM cluster to try the launcher on is
the tests' ``tests/support/local_slurm.py``).
"""
