"""Scoring: gates on every head and FFN neuron, the alignment/uniformity loss, and each unit's importance."""
