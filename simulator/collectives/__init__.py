"""Collective communication cost models (placeholder until the module lands)."""
