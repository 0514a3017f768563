"""clustersim: a discrete-event performance simulator for distributed LLM training."""

from .api import plan, simulate
from .errors import ConfigError
from .metrics import Result
from .sensitivity import sensitivity
from .sweep import search, sweep

__all__ = ["ConfigError", "Result", "plan", "search", "sensitivity", "simulate", "sweep"]
__version__ = "0.1.0"
