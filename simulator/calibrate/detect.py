"""Read ``--measurements`` files, each in whatever format its content shows.

Detection looks at the content, not the extension: a Kineto trace is JSON with
``traceEvents``; an nccl-tests table has the ``size count type ... busbw`` header; a kernel
CSV has a header naming m, n, k or seq, heads; a runs YAML starts a ``runs:`` list; a
training log prints Megatron's ``elapsed time per iteration (ms)`` or torchtitan's
``step: ... tps:``. Anything else is a one-line ConfigError naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import kernels, kineto, nccl, steplogs
from .measurements import Measurements

FORMATS = ("nccl-tests *_perf output", "kernel-timings CSV", "Kineto trace JSON",
           "runs YAML", "Megatron / NeMo / torchtitan training log")


def read(files: list[str | Path], base: Any) -> Measurements:
    """All measurements of ``files`` (``base``: the topology document runs resolve on)."""
    out = Measurements()
    if not files:
        raise ConfigError("--measurements", None, "give at least one file")
    for f in files:
        out.extend(read_one(Path(f), base))
    return out


def read_one(path: Path, base: Any) -> Measurements:
    name = str(path)
    if not path.is_file():
        raise ConfigError("--measurements", name, "no such file")
    text = kineto.read(path)
    m = Measurements(files=[name])
    head = text[:4096]
    if kineto.looks_like(head) or name.endswith((".json", ".json.gz")):
        profile = kineto.parse(path, text)
        side = steplogs.sidecar(path)
        if side is not None:
            profile.run = _trace_run(side, base)
        m.traces.append(profile)
    elif nccl.looks_like(text):
        m.collectives = nccl.parse(path, text)
    elif kernels.looks_like(text):
        m.gemms, m.attention = kernels.parse(path, text)
    elif steplogs.looks_like_runs(text):
        m.runs = steplogs.parse_runs(path, text, base)
    elif steplogs.looks_like_log(text):
        m.runs = [steplogs.parse_log(path, text, base)]
    else:
        raise ConfigError("measurements", name, "unknown format; expected one of: "
                          + "; ".join(FORMATS), source=f"{name}:1")
    return m


def _trace_run(side: Path, base: Any) -> Any:
    """The run beside a trace (``TRACE.run.yaml``: workload, set; no step time needed)."""
    import yaml

    run = yaml.safe_load(side.read_text()) or {}
    if not isinstance(run, dict):
        raise ConfigError("run config", run, "must be a mapping {workload, set}",
                          source=f"{side}:1")
    return steplogs._run({**run, "step_time_s": run.get("step_time_s", 1.0)}, f"{side}:1",
                         base, "run")
