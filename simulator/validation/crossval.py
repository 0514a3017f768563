"""Cross-validated accuracy: refit the GPU constants without the cases they must predict.

The shipped constants are fitted on the training cases of each GPU, and every held-out case
has a sibling in training (same model, plan and source table, another GPU count), so the
held-out error is close to in-sample. Here the constants are refitted, with the same recipe
as the shipped fit (:data:`RECIPES`, the commands in each constant's ``sources:``), once per
left-out *fold*, and only the left-out cases are scored:

* ``logo`` (leave one group out): a fold is one model and plan family from one source; a BF16
  group and its FP8 twin (same table, ``-fp8`` in the group id) leave together, and so do all
  GPU counts of a table.
* ``loso`` (leave one source out): a fold is one publication / release (:func:`source_key`:
  Narayanan 2021, Korthikanti 2022, the dgxc 24.11, 24.09, 25.04 tables). When a GPU has no
  case left to fit, its constants come from another GPU (:func:`donor`): that is an unseen GPU.
* ``unseen_gpu``: every case of a GPU predicted with another GPU's fitted constants.
* ``fixed``: categories no constant is fitted to (MoE step times): their error as is.

Refits use a per-case response surface (:mod:`~simulator.validation.surrogate`) to find the
constants; the left-out cases are then predicted with the full simulator. Everything is
written to :data:`RESIDUALS` (package data, read by :mod:`simulator.metrics.uncertainty`).

``python -m simulator.validation.crossval`` (or ``clustersim validate --cv``) regenerates it
(a few minutes on one core); ``--topology`` restricts to one GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field

from ..api import resolve
from ..config import load_topology
from ..metrics.uncertainty import RESIDUALS
from ..precision import precision_of
from .cases import Case, load_cases, precision
from .fit import BOUNDS, FIT_CATEGORIES, fit, shipped_values
from .predict import predict
from .report import write_atomic
from .surrogate import Surface, build_surface

FP8 = "gpu.fp8_gemm_efficiency"
FP4 = "gpu.fp4_gemm_efficiency"
# the GEMM efficiencies of one precision only: a case's surface spans its own, not the others
PRECISION_ONLY = (FP8, FP4)


@dataclass(frozen=True)
class Stage:
    """One step of a GPU's fit: constants fitted on the training cases of one precision."""

    precision: str | None
    params: tuple[str, ...]
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)


# The shipped fits, as recorded in each fitted constant's `sources:` (topologies/*.yaml).
RECIPES: dict[str, tuple[Stage, ...]] = {
    "dgx-a100": (Stage(None, ("gpu.gemm_efficiency",)),),
    # Hopper and Blackwell fused attention is the cuDNN kernel's measured rate
    # (topologies/*.yaml, simulator/compute/attention.py), not a fitted constant: H100 and
    # GB200 fit their GEMMs only
    "dgx-h100": (Stage("bf16", ("gpu.gemm_efficiency", "gpu.gemm_half_dim"),
                       {"gpu.gemm_efficiency": (0.6, 0.8)}),
                 Stage("fp8", (FP8,))),
    "gb200-nvl72": (Stage("bf16", ("gpu.gemm_efficiency",),
                          {"gpu.gemm_efficiency": (0.40, 0.90)}),
                    Stage("fp8", (FP8,))),
    # no BF16 GB300 run is published: only the FP8 and NVFP4 efficiencies are fitted, the BF16
    # constants are GB200's (topologies/gb300-nvl72.yaml)
    "gb300-nvl72": (Stage("fp8", (FP8,)), Stage("fp4", (FP4,))),
}


def fold_key(case: Case) -> str:
    """One model and plan family from one source: the group id without its ``-fp8``."""
    return re.sub(r"-fp8(?=-|$)", "", case.group)


def _release(text: str) -> str | None:
    m = re.search(r"(?<![\d.])(2\d\.\d\d)(?![\d])", text)
    return m.group(1) if m else None


def source_key(case: Case, cases: list[Case] = ()) -> str:
    """The publication: the group prefix plus the release tag (``24.11``) of its source; a
    source that names only a commit takes the tag of another case citing the same commit."""
    tag = _release(case.source)
    commit = re.search(r"commit ([0-9a-f]{7,40})", case.source)
    if tag is None and commit:
        tag = next((t for c in cases if commit.group(1) in c.source
                    and (t := _release(c.source))), None)
    return case.group.split("-")[0] + (f"-{tag}" if tag else "")


def shipped(topology: str, params: list[str] | tuple[str, ...]) -> dict[str, float]:
    """The topology file's values, an unset efficiency at its fallback
    (:func:`.fit.shipped_values`)."""
    return shipped_values(load_topology(topology), params)


def donor(topology: str, cases: list[Case]) -> str:
    """The other fitted GPU with the most dense cases (ties: name order)."""
    counts = {t: sum(c.topology == t and c.category == "dense_step_time" for c in cases)
              for t in RECIPES if t != topology}
    return max(sorted(counts), key=lambda t: counts[t])


def _params(topology: str) -> list[str]:
    return [p for st in RECIPES[topology] for p in st.params]


def fit_box(topology: str) -> dict[str, tuple[float, float]]:
    """The recipe's bounds for every constant it fits (the surfaces span all of it)."""
    return {p: st.bounds.get(p, BOUNDS[p]) for st in RECIPES[topology] for p in st.params}


def _surface(case: Case, box: dict[str, tuple[float, float]]) -> Surface:
    # a precision's GEMM efficiency only enters the cases whose precision times GEMMs with it
    own = "gpu." + precision_of(precision(case)).efficiency
    return build_surface(case, {p: b for p, b in box.items()
                                if p not in PRECISION_ONLY or p == own})


def build_surfaces(cases: list[Case], topology: str, log: Callable[[str], None] = print,
                   jobs: int = 1) -> dict[str, Surface]:
    """Every case's surface; ``jobs`` > 1 builds them in worker processes (same result)."""
    box = fit_box(topology)
    with ProcessPoolExecutor(jobs) if jobs > 1 else nullcontext() as pool:
        made = (pool.map if pool else map)(_surface, cases, [box] * len(cases))
        out = {}
        for i, (c, surf) in enumerate(zip(cases, made, strict=True)):
            out[c.id] = surf
            log(f"  surface {i + 1}/{len(cases)} {c.id}: misfit {surf.fit_error:.2%}")
    return out


def refit(train: list[Case], topology: str, surfaces: dict[str, Surface],
          fallback: dict[str, float]) -> tuple[dict[str, float], list[str], list[str]]:
    """The recipe's stages on ``train``; a stage with no case takes ``fallback`` values.
    Returns the constants, those that stopped on a bound and those taken from ``fallback``."""
    box = fit_box(topology)
    cur = shipped(topology, _params(topology))
    edges, borrowed = [], []
    for st in RECIPES[topology]:
        sub = [c for c in train if st.precision is None or precision(c) == st.precision]
        if not sub:
            cur.update({p: fallback[p] for p in st.params})
            borrowed += st.params
            continue
        cur = fit(sub, cur, list(st.params), sweeps=3, iters=20, log=lambda _: None,
                  predictor=lambda c, o: surfaces[c.id](o), bounds=box)
        edges += [p for p in st.params
                  if min(abs(cur[p] - box[p][0]), abs(cur[p] - box[p][1])) < 2e-3 * box[p][1]]
    return cur, edges, borrowed


def case_info(case: Case) -> dict:
    """What the interval lookup keys on: GPU, precision, GPU count, parallel degrees."""
    w, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"],
                   case.topology_overrides)
    p = w.parallelism
    return {"gpu": t.gpu.name, "precision": precision(case), "num_gpus": p.num_gpus,
            "axes": {"tp": p.tensor, "pp": p.pipeline, "dp": p.data, "cp": p.context,
                     "ep": p.expert, "vp": p.vp}}


def _record(c: Case, scheme: str, fold: str, pred: float, base: float, source: str) -> dict:
    return {"id": c.id, "group": c.group, "fold": fold, "source": source,
            "scheme": scheme, "category": c.category, "topology": c.topology,
            **case_info(c), "measured": c.measured, "predicted": pred,
            "error": pred / c.measured - 1.0, "in_sample_error": base / c.measured - 1.0}


def crossvalidate(topology: str, cases: list[Case], log: Callable[[str], None] = print,
                  jobs: int = 1) -> tuple[list[dict], list[dict]]:
    """(residual records, fold records) of every scheme for one fitted GPU."""
    mine = [c for c in cases if c.topology == topology and c.category in FIT_CATEGORIES]
    log(f"{topology}: {len(mine)} cases, building surfaces")
    surfaces = build_surfaces(mine, topology, log, jobs)
    base = {c.id: predict(c) for c in mine}
    other = donor(topology, cases)
    fallback = shipped(other, _params(topology))
    sources = {c.id: source_key(c, cases) for c in cases}
    records, folds = [], []
    for scheme, key in (("logo", fold_key), ("loso", lambda c: sources[c.id])):
        for fold in sorted({key(c) for c in mine}):
            out = [c for c in mine if key(c) == fold]
            train = [c for c in mine if key(c) != fold]
            consts, edges, borrowed = refit(train, topology, surfaces, fallback)
            folds.append({"scheme": scheme, "topology": topology, "fold": fold,
                          "train_cases": len(train), "constants": consts, "at_edge": edges,
                          "donor": other if borrowed else "", "borrowed": borrowed})
            log(f"  {scheme} {fold}: {consts}" + (f" (edge: {edges})" if edges else ""))
            records += [_record(c, scheme, fold, predict(c, consts), base[c.id],
                                sources[c.id]) for c in out]
    records += [_record(c, "unseen_gpu", other, predict(c, fallback), base[c.id],
                        sources[c.id]) for c in mine if c.category == "dense_step_time"]
    folds.append({"scheme": "unseen_gpu", "topology": topology, "fold": topology,
                  "train_cases": 0, "constants": fallback, "at_edge": [], "donor": other,
                  "borrowed": list(fallback)})
    return records, folds


# (category, topology) pairs whose training cases fit a constant outside the recipes: DGX H100
# host_launch_us is fitted on the dgx-h100 MoE training cases (topologies/dgx-h100.yaml
# sources). Their records are marked in-sample; only the held-out third of them is an error.
FITTED_ELSEWHERE = {("moe_step_time", "dgx-h100")}


def fixed_records(cases: list[Case]) -> list[dict]:
    """Step-time categories without refitted constants (MoE), every GPU: their error as is.
    ``in_sample`` marks training cases of a pair in :data:`FITTED_ELSEWHERE`."""
    out = []
    for c in cases:
        if c.category.endswith("step_time") and c.category not in FIT_CATEGORIES:
            p = predict(c)
            rec = _record(c, "fixed", c.group, p, p, source_key(c, cases))
            rec["in_sample"] = (c.category, c.topology) in FITTED_ELSEWHERE and not c.holdout
            out.append(rec)
    return out


def run(topologies: list[str] | None = None, log: Callable[[str], None] = print,
        jobs: int = 1) -> dict:
    cases = load_cases()
    records, folds = [], []
    for topo in topologies or sorted(RECIPES):
        r, f = crossvalidate(topo, cases, log, jobs)
        records += r
        folds += f
    records += fixed_records(cases)
    return {"generated_by": "python -m simulator.validation.crossval",
            "error": "predicted / measured - 1", "folds": folds, "residuals": records}


def write(doc: dict, path=RESIDUALS) -> None:
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", action="append", choices=sorted(RECIPES), default=None)
    ap.add_argument("-o", "--output", default=str(RESIDUALS))
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for the surfaces")
    args = ap.parse_args(argv)
    doc = run(args.topology, log=lambda line: print(line, flush=True), jobs=args.jobs)
    write(doc, args.output)
    print(f"wrote {args.output} ({len(doc['residuals'])} residuals)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
