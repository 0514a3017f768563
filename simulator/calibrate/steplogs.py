"""Measured step times: a runs YAML, or training logs with the run's config beside them.

Runs YAML: ``runs: [{workload: NAME_OR_PATH, set: {dotted.field: value}, step_time_s: S}]``
on the base topology. Training logs: Megatron-LM / NeMo / Megatron-Bridge print
``elapsed time per iteration (ms): X`` on every logged iteration (megatron/training/
training.py ``training_log``); torchtitan prints ``step: N ... tps: T`` (tokens per second
per GPU, torchtitan/train.py). A log's run is described by ``LOG.run.yaml`` (or
``STEM.run.yaml``) beside it: ``{workload: ..., set: {...}, skip: 2}``; the measured step is
the median of the logged steps after the first ``skip``. When the log prints Megatron's
argument block (``  tensor_model_parallel_size ....... 8``) or the global batch size on its
iteration lines, each value is checked against the run's config.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .measurements import StepRun

_MEGATRON = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
_GBS = re.compile(r"global batch size:\s*(\d+)")
_TITAN = re.compile(r"\bstep:\s*(\d+)\b.*?\btps:\s*([0-9,.]+)")
_ARG = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?([a-z_]+) \.{3,} (\S+)\s*$")
# Megatron argument -> workload field it must equal
ARGS = {"tensor_model_parallel_size": "parallelism.tensor",
        "pipeline_model_parallel_size": "parallelism.pipeline",
        "context_parallel_size": "parallelism.context",
        "expert_model_parallel_size": "parallelism.expert",
        "global_batch_size": "training.global_batch_size",
        "micro_batch_size": "training.micro_batch_size",
        "seq_length": "model.seq_length", "num_layers": "model.num_layers",
        "hidden_size": "model.hidden_size"}


def looks_like_runs(text: str) -> bool:
    return bool(re.search(r"^runs:\s*$|^runs:\s*\[", text, re.M))


def looks_like_log(text: str) -> bool:
    return bool(_MEGATRON.search(text) or _TITAN.search(text))


def parse_runs(path: str | Path, text: str, base: Any) -> list[StepRun]:
    """The runs of a runs YAML, each checked to resolve on ``base``."""
    from ..config.loader import parse_yaml

    name = str(path)
    data, lines = parse_yaml(text, name)
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list) or not runs:
        raise ConfigError("runs", runs, "must be a non-empty list of {workload, set, "
                          "step_time_s}", source=f"{name}:{lines.get('runs', 1)}")
    out = []
    for i, run in enumerate(runs):
        where = f"{name}:{lines.get(f'runs.{i}', lines.get('runs', 1))}"
        out.append(_run(run, where, base, f"runs[{i}]"))
    return out


def _run(run: Any, where: str, base: Any, label: str, step: float | None = None) -> StepRun:
    if not isinstance(run, dict) or "workload" not in run:
        raise ConfigError(label, run, "needs workload (a name or path)", source=where)
    unknown = set(run) - {"workload", "set", "step_time_s", "skip"}
    if unknown:
        raise ConfigError(label, sorted(unknown), "allowed keys: workload, set, step_time_s, "
                          "skip", source=where)
    sets = run.get("set") or {}
    if not isinstance(sets, dict):
        raise ConfigError(f"{label}.set", sets, "must map dotted fields to values",
                          source=where)
    step = run.get("step_time_s") if step is None else step
    if not isinstance(step, (int, float)) or isinstance(step, bool) or not step > 0:
        raise ConfigError(f"{label}.step_time_s", step, "must be a number of seconds > 0",
                          source=where)
    workload = str(run["workload"])
    _check_resolves(workload, sets, base, where)
    return StepRun(workload=workload, overrides=dict(sets), step_time_s=float(step),
                   where=where)


def _check_resolves(workload: str, sets: dict, base: Any, where: str) -> None:
    from ..api import resolve

    try:
        resolve(workload, base, sets)
    except ConfigError as exc:
        raise ConfigError(exc.field, exc.value, exc.allowed,
                          source=exc.source if exc.source and exc.source != "override"
                          else where) from None


def sidecar(path: Path) -> Path | None:
    """``LOG.run.yaml`` or ``STEM.run.yaml`` beside the log, if present."""
    for cand in (path.with_name(path.name + ".run.yaml"), path.with_suffix(".run.yaml")):
        if cand.is_file():
            return cand
    return None


def parse_log(path: Path, text: str, base: Any) -> StepRun:
    """The measured step of a training log, its run from the config beside it."""
    name = str(path)
    side = sidecar(path)
    if side is None:
        raise ConfigError("run config", None, f"a training log needs its run beside it: "
                          f"{path.name}.run.yaml with workload and set", source=f"{name}:1")
    run = yaml.safe_load(side.read_text()) or {}
    if not isinstance(run, dict):
        raise ConfigError("run config", run, "must be a mapping {workload, set, skip}",
                          source=f"{side}:1")
    skip = run.get("skip", 2)
    times, gbs_lines, args = _scan(text)
    if len(times) <= skip:
        raise ConfigError("log", name, f"{len(times)} logged steps, not more than skip "
                          f"({skip})", source=f"{name}:1")
    step_values = [t for t, _, _ in times[skip:]]
    step = statistics.median(step_values)
    from ..api import resolve

    _run(run, f"{side}:1", base, "run", step=1.0)
    w, _ = resolve(str(run["workload"]), base, run.get("set") or {})
    if times[0][1] == "tps":  # torchtitan: tokens per second per GPU -> seconds per step
        dp = w.parallelism.data
        step = w.training.global_batch_size * w.model.seq_length / dp / step
    _check_args(w, args + gbs_lines, name)
    return StepRun(workload=str(run["workload"]), overrides=dict(run.get("set") or {}),
                   step_time_s=step, where=f"{name}:{times[skip][2]}")


def _scan(text: str) -> tuple[list[tuple[float, str, int]], list, list]:
    times, gbs, args = [], [], []
    for i, line in enumerate(text.splitlines(), start=1):
        if (m := _MEGATRON.search(line)) is not None:
            times.append((float(m.group(1)) * 1e-3, "megatron", i))
            if (g := _GBS.search(line)) is not None:
                gbs.append(("global_batch_size", g.group(1), i))
        elif (m := _TITAN.search(line)) is not None:
            times.append((float(m.group(2).replace(",", "")), "tps", i))
        elif (m := _ARG.match(line)) is not None and m.group(1) in ARGS:
            args.append((m.group(1), m.group(2), i))
    return [(t, kind, i) for t, kind, i in times], gbs, args


def _check_args(w: Any, args: list[tuple[str, str, int]], name: str) -> None:
    """Every Megatron argument the log prints equals the run's config; else file:line."""
    for arg, value, line in args:
        section, field = ARGS[arg].split(".")
        want = getattr(getattr(w, section), field)
        try:
            got = int(value)
        except ValueError:
            continue
        if got != want:
            raise ConfigError(ARGS[arg], want, f"the log says {arg} = {got}: the run config "
                              "beside it does not match the log", source=f"{name}:{line}")
