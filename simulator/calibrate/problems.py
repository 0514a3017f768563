"""What each kind of measurement predicts, and from which topology constants.

A :class:`Problem` maps a dict of constants (dotted topology paths, YAML units) to predicted
seconds for its measured points, through the simulator's own cost models: kernels through
:mod:`simulator.compute`, nccl-tests rows through :func:`simulator.collectives.collective_time`,
step times through :func:`simulator.api.simulate`. Nothing here fits; :mod:`.fit` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..collectives import collective_time
from ..compute import gemm_time
from ..errors import ConfigError
from ..hardware import GB, MB, US, Topology
from .measurements import AttentionPoint, CollectivePoint, GemmPoint, StepRun

# physical bounds per constant (YAML units): a fit never leaves them
BOUNDS = {
    "gemm_efficiency": (0.05, 1.0), "fp8_gemm_efficiency": (0.05, 1.0),
    "attention_efficiency": (0.05, 1.0), "memory_bandwidth_efficiency": (0.05, 1.0),
    "gemm_half_dim": (1.0, 8192.0), "kernel_overhead_us": (0.1, 100.0),
    "efficiency": (0.02, 1.0), "alltoall_efficiency": (0.02, 1.0),
    "latency_us": (0.05, 200.0), "half_bandwidth_MB": (0.001, 100_000.0),
    "curve_exponent": (0.1, 1.0),  # <= 1: a larger message is never slower
}
SI = {"efficiency": ("efficiency", 1.0), "alltoall_efficiency": ("alltoall_efficiency", 1.0),
      "latency_us": ("latency_s", US), "half_bandwidth_MB": ("half_bandwidth_bytes", MB),
      "curve_exponent": ("curve_exponent", 1.0), "nvls_busbw_GBps": ("nvls_busbw", GB)}
FALLBACK = {"fp8_gemm_efficiency": "gemm_efficiency", "alltoall_efficiency": "efficiency"}
GPU_SI = {"gemm_efficiency": ("gemm_efficiency", 1.0),
          "fp8_gemm_efficiency": ("fp8_gemm_efficiency", 1.0),
          "attention_efficiency": ("attention_efficiency", 1.0),
          "gemm_half_dim": ("gemm_half_dim", 1.0),
          "kernel_overhead_us": ("kernel_overhead_s", US),
          "memory_bandwidth_efficiency": ("memory_bandwidth_efficiency", 1.0)}


def bounds(path: str, doc: dict) -> tuple[float, float]:
    """Physical range of constant ``path`` (NVLS busbw: up to twice the tier's line rate)."""
    field = path.rsplit(".", 1)[1]
    if field == "nvls_busbw_GBps":
        tier = doc["tiers"][int(path.split(".")[1])]
        return 1.0, 2.0 * float(tier["bandwidth_GBps"])
    return BOUNDS[field]


def value(doc: dict, path: str) -> float:
    """The constant at dotted ``path`` in the topology document (schema default if unset)."""
    from ..config import load_topology

    node: Any = doc
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node.get(part)
        if node is None:
            break
    if node is None:  # unset: the schema default, or the tier's efficiency for alltoall
        cfg = load_topology(doc)
        obj: Any = cfg
        for part in path.split("."):
            obj = obj[int(part)] if isinstance(obj, list) else getattr(obj, part)
        if obj is None:  # fp8 efficiency defaults to the bf16 one, all-to-all to the ring
            head, field = path.rsplit(".", 1)
            return value(doc, f"{head}.{FALLBACK[field]}")
        node = obj
    return float(node)


@dataclass
class Problem:
    """Measured seconds of ``points`` and a predictor from constants to seconds."""

    stage: str
    points: list[Any]
    params: list[str]
    predict: Callable[[dict[str, float]], np.ndarray]

    @property
    def measured(self) -> np.ndarray:
        return np.array([_seconds(p) for p in self.points])


def _seconds(p: Any) -> float:
    return p.step_time_s if isinstance(p, StepRun) else p.seconds


def kernel_problem(topo: Topology, gemms: list[GemmPoint], attn: list[AttentionPoint]
                   ) -> Problem:
    params = []
    if any(g.dtype != "fp8" for g in gemms):
        params.append("gpu.gemm_efficiency")
    if any(g.dtype == "fp8" for g in gemms):
        params.append("gpu.fp8_gemm_efficiency")
    if gemms:
        params.append("gpu.gemm_half_dim")
    if attn:
        params.append("gpu.attention_efficiency")
    params.append("gpu.kernel_overhead_us")
    points: list[Any] = [*gemms, *attn]

    def predict(values: dict[str, float]) -> np.ndarray:
        gpu = replace(topo.gpu, **{GPU_SI[k.split(".")[1]][0]: v * GPU_SI[k.split(".")[1]][1]
                                   for k, v in values.items() if k.startswith("gpu.")})
        if "gpu.gemm_efficiency" in values and "gpu.fp8_gemm_efficiency" not in values \
                and topo.gpu.fp8_gemm_efficiency == topo.gpu.gemm_efficiency:
            gpu = replace(gpu, fp8_gemm_efficiency=gpu.gemm_efficiency)
        out = []
        for p in points:
            if isinstance(p, GemmPoint):
                out.append(gemm_time(p.m, p.n, p.k, gpu, p.dtype))
            else:
                out.append(p.seconds_on(gpu))
        return np.array(out)

    return Problem("kernels", points, params, predict)


def placement(topo: Topology, p: CollectivePoint) -> Any:
    """Where an nccl-tests group sits on ``topo``: ``local`` ranks per node (stride)."""
    size0 = topo.tiers[0].size
    if p.ranks > topo.max_gpus:
        raise ConfigError("ranks", p.ranks, f"more than the base topology's {topo.max_gpus} "
                          "GPUs", source=p.where)
    local = min(p.local, p.ranks)
    if local > size0 or size0 % local:
        raise ConfigError("ranks per node", local, f"must divide the base topology's "
                          f"scale-up domain of {size0} GPUs", source=p.where)
    stride = 1 if p.ranks <= local or local == size0 else size0 // local
    return topo.place(p.ranks, stride)


def network_problem(topo: Topology, doc: dict, points: list[CollectivePoint]) -> Problem:
    places = [placement(topo, p) for p in points]
    params: list[str] = []
    for p, pl in zip(points, places, strict=True):
        used = list(range(0 if pl.local > 1 or pl.span == 0 else 1, pl.span + 1))
        for i in used:
            names = ["efficiency", "half_bandwidth_MB", "curve_exponent"]
            if p.op == "all_to_all":
                names = ["alltoall_efficiency", "half_bandwidth_MB", "curve_exponent"]
            if i == pl.span:
                names.append("latency_us")
                if p.op == "all_reduce" and doc["tiers"][i].get("nvls_busbw_GBps"):
                    names.append("nvls_busbw_GBps")
            if p.op == "send_recv":
                names = ["efficiency"] + (["latency_us"] if i == pl.span else [])
            params += [f"tiers.{i}.{n}" for n in names if f"tiers.{i}.{n}" not in params]

    def predict(values: dict[str, float]) -> np.ndarray:
        tiers = list(topo.tiers)
        for k, v in values.items():
            _, i, field = k.split(".")
            name, scale = SI[field]
            tiers[int(i)] = replace(tiers[int(i)], **{name: v * scale})
        t = Topology(name=topo.name, gpu=topo.gpu, tiers=tuple(tiers))
        return np.array([collective_time(p.op, p.nbytes, pl, t)
                         for p, pl in zip(points, places, strict=True)])

    return Problem("network", list(points), params, predict)


def step_problem(doc_for: Callable[[dict[str, float]], dict], runs: list[StepRun],
                 params: list[str]) -> Problem:
    """Step times: each run simulated on the topology document ``doc_for(values)``."""
    from ..api import simulate

    def predict(values: dict[str, float]) -> np.ndarray:
        doc = doc_for(values)
        return np.array([simulate(r.workload, doc, overrides=r.overrides).step_time_s
                         for r in runs])

    return Problem("steps", list(runs), params, predict)
