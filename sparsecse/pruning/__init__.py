"""Pruning: scores + λ + a target (sparsity or kept-FLOPs/parameters budget) -> masks, and their costs."""
