"""clustersim: a discrete-event performance simulator for distributed LLM training."""

from .api import plan, simulate
from .errors import ConfigError
from .metrics import Result

__all__ = ["ConfigError", "Result", "plan", "simulate"]
__version__ = "0.1.0"
