"""Compression methods beyond one-shot masks (iterative pruning, ...)."""
