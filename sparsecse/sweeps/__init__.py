"""Sparsity sweeps: the run (:mod:`sparsecse.sweeps.run`), its points and directory (its file names in
:mod:`sparsecse.artifacts.sweep_layout`), locks that split it between processes, and the cluster launcher; the
report and figures rebuilt from its points are :mod:`sparsecse.reporting`'s.

The package is ``sweeps`` (not ``sweep``) so that ``sparsecse.sweep`` stays the public function."""
