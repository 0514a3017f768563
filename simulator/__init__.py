"""clustersim: a discrete-event performance simulator for distributed LLM training."""

from .api import plan, simulate
from .errors import ConfigError
from .metrics import Result
from .reliability.run import TimeToTrain, time_to_train
from .sweep import search, sweep

__all__ = ["ConfigError", "Result", "TimeToTrain", "plan", "search", "simulate", "sweep",
           "time_to_train"]
__version__ = "0.1.0"
