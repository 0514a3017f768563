"""clustersim: a discrete-event performance simulator for distributed LLM training."""

from .errors import ConfigError

__all__ = ["ConfigError"]
__version__ = "0.1.0"
