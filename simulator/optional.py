"""Optional dependencies: imported on first use, with an install hint when missing.

The core (``clustersim run``, ``memory``, ``collective``, ``search``) needs only
numpy, simpy, pydantic and pyyaml. Heavier libraries load when a feature
needs them, which keeps ``import simulator`` and the CLI fast (see
``benchmarks/bench_startup.py``): pandas and matplotlib are installed with
clustersim but imported late; dask and pyarrow are extras
(``pip install "clustersim[dask]"``, ``"clustersim[parquet]"``) and a missing
one is a :class:`~simulator.errors.ConfigError` (one line, exit 2) naming the
command that installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import ConfigError

# import name -> (extra that installs it, what needs it)
EXTRAS = {
    "distributed": ("dask", "the dask executor"),
    "pyarrow": ("parquet", "Parquet output"),
    "torch": ("bench", "clustersim bench-kernels"),
    "starlette": ("web", "clustersim serve"),
    "uvicorn": ("web", "clustersim serve"),
}


def require(module: str, field: str) -> ModuleType:
    """Import ``module``; if it is missing raise a ConfigError on ``field`` with the fix."""
    try:
        return importlib.import_module(module)
    except ImportError:
        extra, feature = EXTRAS.get(module, (None, module))
        fix = (f'pip install "clustersim[{extra}]"' if extra else f"pip install {module}")
        raise ConfigError(field, module, f"{feature} needs {module}, which is not installed; "
                          f"install it with: {fix}") from None
