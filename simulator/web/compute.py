"""What a web worker computes: the CLI's run JSON, the editor's view, search and capacity jobs.

Each function takes a request body (:mod:`.inputs`) and returns plain JSON-able data;
bad input raises :class:`~simulator.errors.ConfigError`. ``run`` is byte for byte
``clustersim run --format json`` (:func:`simulator.reliability.result.json_text`). ``detail`` adds
what the page draws besides: memory per pipeline stage against the GPU's capacity, the
pipeline timeline (the ideal replay's records, as ``clustersim plot timeline`` draws
them), the effective values of the editor's fields and the workload as YAML.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from ..reliability.result import json_text, run_result
from .inputs import check_overrides, is_text, resolve_request, shipped_path

MAX_SPANS = 20_000  # timeline bars sent to the page; more is not drawable anyway
# The editor's fields (dotted path -> how the page shows it); the page reads the
# effective value of each from ``detail``'s "fields".
WORKLOAD_FIELDS = (
    "parallelism.tensor", "parallelism.pipeline", "parallelism.context",
    "parallelism.expert", "parallelism.virtual_pipeline", "parallelism.data",
    "parallelism.sequence_parallel", "parallelism.pipeline_schedule",
    "parallelism.pipeline_model_parallel_layout",
    "training.micro_batch_size", "training.global_batch_size", "training.precision",
    "training.recompute", "model.seq_length", "model.moe.token_dispatcher_type",
    "training.stack", "training.peft", "training.packed_document_length",
)
TOPOLOGY_FIELDS = ("tiers.0.bandwidth_GBps", "tiers.1.bandwidth_GBps")


def run(body: Any) -> str:
    """``POST /api/run``: the text ``clustersim run --format json`` prints."""
    w, t = resolve_request(body)
    return json_text(run_result(w, t))


def _get(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        elif isinstance(data, dict):
            data = data.get(part)
        else:
            return None
    return data


def detail(body: Any) -> dict[str, Any]:
    """``POST /api/detail``: the run JSON (as an object) and what the page draws with it."""
    from .. import api
    from ..engine import ListRecorder, run_engine

    w, t = resolve_request(body)
    result = json.loads(json_text(run_result(w, t)))
    topo = api.Topology.from_config(t)
    plan = api.build_plan(w, topo, ops=False)
    # the direct replay: the SimPy loop's records (same times), 2-4x sooner
    engine = run_engine(plan.engine_input, ListRecorder(), engine="direct")
    mem = api.estimate_memory(w, topo, plan.partition)
    wd, td = w.model_dump(), t.model_dump()
    return {
        "result": result,
        "memory_stages": [{"stage": s.stage, "total_GB": s.total / 1e9, **s.breakdown_GB()}
                          for s in mem.stages],
        "capacity_GB": mem.capacity_bytes / 1e9,
        "timeline": timeline(engine, len(plan.engine_input.schedule)),
        "fields": {k: _get(wd, k) for k in WORKLOAD_FIELDS}
        | {f"topology:{k}": _get(td, k) for k in TOPOLOGY_FIELDS},
        "tiers": [tier["name"] for tier in td["tiers"]],
        "moe": wd["model"].get("moe") is not None,
        "yaml": export_yaml(body),
    }


def export_yaml(body: Any) -> dict[str, str | None]:
    """The workload document as given (shipped or sent) with the overrides written into it,
    and the topology's likewise when it has overrides (else None: the name says it)."""
    import yaml

    from ..config.loader import apply_overrides, parse_yaml, read_document

    out: dict[str, str | None] = {}
    for kind, folder, key in (("workload", "workloads", "overrides"),
                              ("topology", "topologies", "topology_overrides")):
        ref, ov = body[kind], check_overrides(key, body.get(key))
        if not is_text(ref) and not ov and kind == "topology":
            out[kind] = None
            continue
        data = (parse_yaml(ref, f"{kind}.yaml")[0] if is_text(ref)
                else read_document(shipped_path(kind, ref), folder)[0])
        out[kind] = yaml.safe_dump(apply_overrides(data, ov), sort_keys=False,
                                   default_flow_style=False, width=100)
    return out


def timeline(engine: Any, stages: int) -> dict[str, Any]:
    """Compute-lane bars ``[stage, kind, chunk, micro-batch, start_s, end_s]`` of the ideal
    replay, times to the nanosecond (a bar narrower than that is not drawable)."""
    spans = []
    for r in engine.records:
        if r.stream in ("compute", "optimizer"):
            kind = "O" if r.stream == "optimizer" else r.name
            spans.append([r.stage, kind, r.chunk, r.mb, round(r.start, 9), round(r.end, 9)])
    too_many = len(spans) > MAX_SPANS
    return {"stages": stages, "step_s": engine.step_time,
            "spans": [] if too_many else spans,
            "note": f"{len(spans)} bars, too many to draw; a smaller global batch shows "
                    "the schedule's shape" if too_many else ""}


def _refs(body: Any) -> tuple[Any, Any, dict, dict]:
    """(workload, topology, overrides, topology_overrides) for the Python API: a shipped
    file's path or a YAML document as a dict (overrides already applied), never a path
    the client chose."""
    w, t = resolve_request(body)  # validates everything first, with the CLI's messages
    out: list[Any] = []
    for kind, obj, key in (("workload", w, "overrides"), ("topology", t, "topology_overrides")):
        if is_text(body[kind]):
            out += [obj.model_dump(), {}]
        else:
            out += [shipped_path(kind, body[kind]), check_overrides(key, body.get(key))]
    return out[0], out[2], out[1], out[3]


def _int(body: Any, key: str, default: int, low: int, high: int) -> int:
    from ..errors import ConfigError

    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(key, value, f"must be an integer from {low} to {high}")
    return value


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None, numpy scalars Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


CALLS: dict[str, Callable[[Any], Any]] = {"run": run, "detail": detail}
