"""Fit of a scale-up tier's ring constants to all-reduce curves measured on small groups.

``python -m simulator.collectives.group_fit gb200-nvl72`` fits ``efficiency`` (ring
plateau), ``base_latency_us`` (once per collective) and ``ll_busbw_GBps`` (NCCL's LL
protocol) of the topology's tier 0 by least squares on log bus bandwidth, to the groups of
``validation/collectives/nvlink5_groups.yaml`` marked ``fit: true``, with the tier's other
constants (per-step latency, NVLS curve) as in the topology file; then prints every group's
points, predicted against measured. Units: GB/s (nccl-tests busbw), bytes, microseconds.

A group may also list ``times_us`` (``[[bytes, us], ...]``, nccl-tests' out-of-place time):
below about 128 B the busbw column rounds to 0.00, so a sweep that starts at 8 B is compared
(and, marked ``fit: true``, fitted) on its times; such a group's residuals are its times only,
so its busbw ``points`` do not count twice.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml

from ..config import load_topology
from ..hardware import Topology
from .cost import bus_bandwidth, collective_time

DATA = Path(__file__).parents[2] / "validation" / "collectives" / "nvlink5_groups.yaml"
PARAMS = ("efficiency", "base_latency_us", "ll_busbw_GBps")
BOUNDS = ((0.5, 0.0, 10.0), (1.0, 50.0, 900.0))


def load_groups(path: Path = DATA) -> list[dict]:
    """The measured groups (``points``: ``[[bytes, busbw GB/s], ...]``)."""
    return yaml.safe_load(path.read_text())


def predicted_busbw(topo: Topology, ranks: int, nbytes: float, algo: str | None) -> float:
    """nccl-tests all-reduce busbw the model gives for ``ranks`` consecutive GPUs, GB/s."""
    seconds = collective_time("all_reduce", nbytes, topo.place(ranks), topo, algo)
    return bus_bandwidth("all_reduce", nbytes, ranks, seconds) / 1e9


def predicted_time_us(topo: Topology, ranks: int, nbytes: float, algo: str | None) -> float:
    """nccl-tests all-reduce time the model gives for ``ranks`` consecutive GPUs, us."""
    return collective_time("all_reduce", nbytes, topo.place(ranks), topo, algo) * 1e6


def _topology(name: str, values: np.ndarray | None = None) -> Topology:
    over = {} if values is None else {f"tiers.0.{k}": float(v)
                                      for k, v in zip(PARAMS, values, strict=True)}
    return Topology.from_config(load_topology(name, over))


def residuals(name: str, values: np.ndarray | None, groups: list[dict]) -> np.ndarray:
    """log(predicted / measured) bus bandwidth of every point of ``groups`` (for a group
    with ``times_us``: log(measured / predicted) time, the same quantity at every size)."""
    topo = _topology(name, values)
    out = []
    for g in groups:
        if "times_us" in g:
            out += [np.log(t / predicted_time_us(topo, g["ranks"], s, g.get("algo")))
                    for s, t in g["times_us"]]
        else:
            out += [np.log(predicted_busbw(topo, g["ranks"], s, g.get("algo")) / v)
                    for s, v in g["points"]]
    return np.array(out)


def fit(name: str, groups: list[dict]) -> tuple[np.ndarray, float]:
    """(fitted PARAMS, rms of log residuals) on the ``fit: true`` groups for ``name``."""
    from scipy.optimize import least_squares

    train = [g for g in groups if g.get("fit") and g["topology"] == name]
    cfg = load_topology(name).tiers[0]
    start = [cfg.efficiency, cfg.base_latency_us or 10.0, cfg.ll_busbw_GBps or 300.0]
    result = least_squares(lambda x: residuals(name, x, train), start, bounds=BOUNDS)
    return result.x, float(np.sqrt(np.mean(result.fun ** 2)))


def main(argv: list[str] | None = None) -> int:
    name = (argv if argv is not None else sys.argv[1:] or ["gb200-nvl72"])[0]
    groups = load_groups()
    if any(g.get("fit") and g["topology"] == name for g in groups):
        values, rms = fit(name, groups)
        print(f"{name} tier 0: " + ", ".join(f"{k} {v:.4g}" for k, v in zip(PARAMS, values,
                                                                              strict=True))
              + f" (rms {rms:.1%} on the fit groups)")
    else:  # nothing to fit (e.g. gb300-nvl72 carries gb200's constants): compare only
        print(f"{name}: no group marked fit: true; constants as in the topology file")
    topo = _topology(name)
    for g in groups:
        if g["topology"] != name:
            continue
        print(f"{g['group']} ({g['ranks']} GPUs, fit: {bool(g.get('fit'))})")
        if "times_us" in g:
            for s, t in g["times_us"]:
                p = predicted_time_us(topo, g["ranks"], s, g.get("algo"))
                print(f"  {s:>12d} B  measured {t:9.2f} us  model {p:9.2f} us  {p / t - 1:+6.1%}")
            continue
        for s, v in g["points"]:
            p = predicted_busbw(topo, g["ranks"], s, g.get("algo"))
            print(f"  {s:>12d} B  measured {v:8.2f}  model {p:8.2f}  {p / v - 1:+6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
