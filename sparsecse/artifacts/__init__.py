"""The files sparsecse writes and reads back (manifests, hashes, atomic output, tensor files)."""
