"""The package version, written once (pyproject.toml and ``simulator.__version__`` read it)."""

__version__ = "0.1.0"
