"""Sparsity sweeps: the run (:mod:`.run`), its directory layout (:mod:`.layout`), locks that split it
between processes, the report and figures rebuilt from its points, and the cluster launcher.

The package is ``sweeps`` (not ``sweep``) so that ``sparsecse.sweep`` stays the public function."""
