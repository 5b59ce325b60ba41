"""What the tests run on that is no part of the package (a real single-node SLURM cluster)."""
