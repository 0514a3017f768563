"""Reproducible studies that regenerate pages of ``reports/``."""
