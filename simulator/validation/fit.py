"""Joint calibration of one GPU's efficiency constants against the training cases.

The constants of a topology's ``gpu:`` block (large-GEMM efficiency, the GEMM shape
half-dimension, fused-attention efficiency, ...) are fitted *jointly* on every training
(non-held-out) case that runs on that topology, never per case. The objective is the mean
squared log error, ``mean(log(pred/measured)^2)``, with each category weighted equally so
that a category with many rows does not drown one with few. Each constant is bounded to its
physically plausible range; the search is a deterministic coordinate descent (golden-section
on each constant in turn, a few sweeps), so re-running it gives the same numbers.

Usage (slow on big pipelines, minutes): ``python -m simulator.validation.fit dgx-h100``.
``--precision bf16`` / ``fp8`` fits on the training cases of one precision only, ``--set
NAME=VALUE`` holds a constant, ``--params`` picks what is fitted (default: the bf16 GEMM /
attention constants, plus ``fp8_gemm_efficiency`` when FP8 cases are among those fitted).
DGX H100 is fitted in two stages, bf16 constants on the bf16 cases, then the FP8 efficiency
on the FP8 cases with those held (the exact commands are in ``topologies/dgx-h100.yaml``).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

from ..errors import ConfigError
from ..hardware import Topology
from ..precision import precision_of
from .cases import Case, load_cases, precision
from .predict import predict

GOLDEN = (math.sqrt(5) - 1) / 2
# Plausible ranges (see topologies/*.yaml sources and validation/README.md).
BOUNDS = {
    "gpu.gemm_efficiency": (0.55, 0.90),
    # FP8 large-GEMM efficiency, of the FP8 peak: cuBLASLt FP8 GEMMs reach ~0.70 isolated
    # (Azure ND H100 v5, 32768^3); in training, per-tensor scaling and casts cost more.
    "gpu.fp8_gemm_efficiency": (0.40, 0.85),
    # NVFP4 large-GEMM efficiency, of the fp4 peak: block scaling, the Hadamard transform and
    # the two-level amax cost more around each GEMM than FP8's per-tensor scale.
    "gpu.fp4_gemm_efficiency": (0.25, 0.85),
    "gpu.gemm_half_dim": (32.0, 512.0),
    "gpu.attention_efficiency": (0.30, 0.70),
    "gpu.memory_bandwidth_efficiency": (0.60, 0.95),
    "gpu.kernel_overhead_us": (1.0, 10.0),
    "gpu.host_launch_us": (0.0, 150.0),
}
FIT_CATEGORIES = ("dense_step_time", "layer_time")
DEFAULT_PARAMS = ["gpu.gemm_efficiency", "gpu.gemm_half_dim", "gpu.attention_efficiency"]


def training_cases(topology: str, cases: list[Case] | None = None,
                   categories: tuple[str, ...] = FIT_CATEGORIES) -> list[Case]:
    cases = load_cases(categories=list(categories)) if cases is None else cases
    return [c for c in cases if c.topology == topology and not c.holdout
            and c.category in categories]


def default_params(cases: list[Case]) -> list[str]:
    """The bf16 constants, plus the GEMM efficiency of each other precision among ``cases``
    (``fp8_gemm_efficiency`` when FP8 cases are among them). ``attention_efficiency`` only
    where it is a fitted constant: on Hopper and Blackwell it is a kernel benchmark's rate
    (:data:`simulator.compute.attention.KERNEL_SOURCED`), held, not fitted."""
    from ..compute.attention import KERNEL_SOURCED, arch
    from ..config import load_topology

    own = {"gpu." + precision_of(precision(c)).efficiency for c in cases}
    base = list(DEFAULT_PARAMS)
    gpus = {c.topology for c in cases}
    if gpus and all(arch(Topology.from_config(load_topology(t)).gpu) in KERNEL_SOURCED
                    for t in gpus):
        base.remove("gpu.attention_efficiency")
    return base + sorted(own - set(DEFAULT_PARAMS))


Predictor = Callable[[Case, dict[str, float]], float]


def objective(cases: list[Case], overrides: dict[str, float],
              predictor: Predictor = predict) -> float:
    """Category-balanced mean squared log error of the predictions (dimensionless).

    ``predictor(case, overrides)`` defaults to the full simulation; cross-validation passes
    a cheap per-case surrogate (:mod:`~simulator.validation.surrogate`)."""
    per_cat: dict[str, list[float]] = {}
    for c in cases:
        err = math.log(predictor(c, overrides) / c.measured)
        per_cat.setdefault(c.category, []).append(err * err)
    return sum(sum(v) / len(v) for v in per_cat.values()) / len(per_cat)


def golden_section(f: Callable[[float], float], lo: float, hi: float, iters: int) -> float:
    """The minimiser of a unimodal ``f`` on ``[lo, hi]`` after ``iters`` golden-section
    steps (the interval shrinks by 0.618 a step): the final interval's midpoint."""
    a, b = lo, hi
    x1, x2 = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    f1, f2 = f(x1), f(x2)
    for _ in range(iters):
        if f1 <= f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - GOLDEN * (b - a)
            f1 = f(x1)
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + GOLDEN * (b - a)
            f2 = f(x2)
    return (a + b) / 2


def fit(cases: list[Case], start: dict[str, float], params: list[str], sweeps: int = 2,
        iters: int = 8, log: Callable[[str], None] = print, predictor: Predictor = predict,
        bounds: dict[str, tuple[float, float]] | None = None) -> dict[str, float]:
    """Coordinate descent over ``params`` (keys of :data:`BOUNDS`) from ``start``;
    ``bounds`` narrows ranges for this call only (as ``--bound`` does)."""
    cur = dict(start)
    rng = {**BOUNDS, **(bounds or {})}
    for sweep in range(sweeps):
        for name in params:
            lo, hi = rng[name]

            def f(x: float, name: str = name) -> float:
                return objective(cases, {**cur, name: x}, predictor)

            cur[name] = round(golden_section(f, lo, hi, iters), 3)
            log(f"sweep {sweep + 1} {name} = {cur[name]}  "
                f"objective {objective(cases, cur, predictor):.5f}")
    return cur


def shipped_values(cfg, params) -> dict[str, float]:
    """The topology config ``cfg``'s value of each ``gpu.<name>`` in ``params``; an unset
    efficiency is the value it falls back to (:class:`simulator.hardware.GPU`: FP8 to the
    bf16 one, NVFP4 to the FP8 one)."""
    out = {}
    for p in params:
        name = p.split(".", 1)[1]
        value = getattr(cfg.gpu, name)
        out[p] = float(value if value is not None
                       else getattr(Topology.from_config(cfg).gpu, name))
    return out


def main(argv: list[str] | None = None) -> int:
    from ..config import load_topology

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("topology")
    ap.add_argument("--params", nargs="+", default=None,
                    help="constants to fit (default: gemm_efficiency, gemm_half_dim, "
                    "attention_efficiency where it is fitted (not on Hopper / Blackwell: a "
                    "kernel benchmark's rate), and fp8_gemm_efficiency if FP8 cases exist)")
    ap.add_argument("--sweeps", type=int, default=2)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--precision", default=None, metavar="P",
                    help="only training cases of this training.precision (e.g. bf16, fp8)")
    ap.add_argument("--categories", nargs="+", default=list(FIT_CATEGORIES),
                    help="case categories to fit on (default: dense_step_time layer_time; "
                    "the MoE host constant is fitted on moe_step_time)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="hold a constant at VALUE (not fitted), e.g. gpu.gemm_efficiency=0.7")
    ap.add_argument("--bound", action="append", default=[], metavar="NAME=LO:HI",
                    help="narrow a constant's range, e.g. gpu.gemm_efficiency=0.6:0.8")
    args = ap.parse_args(argv)
    for item in args.bound:
        name, rng = item.split("=", 1)
        lo, hi = (float(x) for x in rng.split(":"))
        BOUNDS[name] = (lo, hi)
    fixed = {name: float(v) for name, v in (item.split("=", 1) for item in args.set)}
    cfg = load_topology(args.topology, fixed)
    cases = [c for c in training_cases(args.topology, categories=tuple(args.categories))
             if args.precision is None or precision(c) == args.precision]
    if not cases:
        raise ConfigError("topology", args.topology, "has no training cases"
                          + (f" of precision {args.precision}" if args.precision else ""))
    params = args.params or default_params(cases)
    start = {**fixed, **shipped_values(cfg, params)}
    print(f"{len(cases)} training cases on {args.topology}; start {start} "
          f"objective {objective(cases, start):.5f}", flush=True)
    best = fit(cases, start, params, args.sweeps, args.iters,
               log=lambda line: print(line, flush=True))
    print("fitted:", best)
    return 0


if __name__ == "__main__":  # pragma: no cover
    try:
        raise SystemExit(main())
    except ConfigError as exc:  # one line on stderr, exit 2, as the CLI does
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
