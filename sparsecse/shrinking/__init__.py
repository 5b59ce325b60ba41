"""Shrinking: remove a mask's units for real, refit what is kept (reconstruction), prune in steps."""
