"""Calibration to a user's own cluster: read measurements, fit the topology's constants.

``clustersim calibrate BASE --measurements FILE... -o MY_CLUSTER.yaml [--report R.md]``:
nccl-tests tables (:mod:`.nccl`), kernel-timings CSV (:mod:`.kernels`, written by
``clustersim bench-kernels``), PyTorch profiler traces (:mod:`.kineto`), step times and
training logs (:mod:`.steplogs`), detected from their content (:mod:`.detect`); fitted by
bounded least squares in stages (:mod:`.core`, :mod:`.fit`, :mod:`.lsq`); written as a
sourced topology YAML (:mod:`.write`) and a fit report (:mod:`.report`). docs/calibrate.md.
"""

from .core import Calibration, calibrate

__all__ = ["Calibration", "calibrate"]
