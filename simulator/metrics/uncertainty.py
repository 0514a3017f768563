"""An interval on every prediction, from cross-validated residuals.

``cv_residuals.json`` (beside this module; regenerate with ``python -m
simulator.validation.crossval``) holds, for every published step time, the simulator's error
when the GPU constants were refitted *without* that case's group (``logo``), without its source
(``loso``), with another GPU's constants (``unseen_gpu``), or as is for categories no constant
is refitted to (``fixed``: MoE step times; a case some constant was fitted on is marked
``in_sample`` and used only to bound the validated space, never as an error). A new
prediction borrows the residuals of the nearest validated category:

1. same category (dense / MoE), GPU and precision: its leave-one-group-out residuals and its
   leave-one-source-out ones (a user's run is, in effect, a new source: another software
   stack, cluster and plan); a GPU whose cases all come from one source borrows the other
   GPUs' leave-one-source-out residuals instead;
2. a GPU with cases but not in this precision: that GPU's residuals in every precision;
3. an unseen GPU: the ``unseen_gpu`` residuals (constants carried over from another GPU);
4. a parallel axis (TP, PP, CP, EP, VP) used by the plan but by no validated case of the
   category on that GPU: the leave-one-source-out residuals are added (a new kind of plan
   is more like a new source than a new group);
5. a GPU count more than :data:`SCALE_STEP` times beyond the validated range: one more step.

More than one step away, or beyond :data:`FAR_SCALE`, is *far outside* the validated space:
no interval, a note says why. The interval is split-conformal on the log error: with the
``n`` residuals ``r_i = |log(1 + e_i)|``, ``q`` is the ``ceil((n + 1) * coverage)``-th
smallest (the largest when that exceeds ``n``) and the interval is ``[t e^-q, t e^q]``,
which covers a new exchangeable case with probability >= ``coverage`` (Vovk et al. 2005;
Lei et al. 2018, "Distribution-free predictive inference for regression").

Cheap: one JSON read per process, no refit, no pandas.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

RESIDUALS = Path(__file__).with_name("cv_residuals.json")
COVERAGE = 0.8
SCALE_STEP = 2.0  # x beyond the validated GPU counts: one step away
FAR_SCALE = 16.0  # x beyond: far outside
AXES = ("tp", "pp", "cp", "ep", "vp")


@dataclass(frozen=True)
class Interval:
    """``low``/``high`` step time, s (None when far outside), its coverage and basis."""

    low: float | None
    high: float | None
    coverage: float
    basis: str
    notes: tuple[str, ...] = ()


@lru_cache(maxsize=4)
def load_residuals(path: str | Path = RESIDUALS) -> tuple[dict[str, Any], ...]:
    """The residual records of the committed file (empty if it is missing), each with
    ``new_source``: a leave-one-source-out residual whose GPU kept constants fitted on its
    own cases (not borrowed from another GPU), or a category with no fitted constants."""
    p = Path(path)
    if not p.is_file():
        return ()
    doc = json.loads(p.read_text())
    borrowed = {(f["scheme"], f["topology"], f["fold"]) for f in doc.get("folds", ())
                if f.get("donor")}
    return tuple({**r, "new_source": (r["scheme"] == "fixed" and not r.get("in_sample")) or (
        r["scheme"] == "loso" and (r["scheme"], r["topology"], r["fold"]) not in borrowed)}
        for r in doc["residuals"])


def conformal_q(errors: list[float], coverage: float = COVERAGE) -> float:
    """Split-conformal half-width in log space for relative errors ``errors``."""
    r = sorted(abs(math.log1p(e)) for e in errors)
    k = math.ceil((len(r) + 1) * coverage)
    return r[min(k, len(r)) - 1]


def _known_gpu(cat: list, on_gpu: list, precision: str, label: str, gpu: str
               ) -> tuple[list, str, list[str]]:
    """A GPU with validated cases: its out-of-group and out-of-source residuals (a user's
    run is a new source); other GPUs' out-of-source ones when it has a single source."""
    steps = []
    stratum = [r for r in on_gpu if r["precision"] == precision]
    basis = f"{label} {gpu} {precision}"
    if not stratum:
        stratum, basis = on_gpu, f"{label} {gpu}, all precisions"
        steps.append(f"no validated {label} {precision} case on {gpu}")
    chosen = [r for r in stratum if r["scheme"] == "logo" or r["new_source"]]
    if not any(r["scheme"] == "loso" and r["new_source"] for r in stratum) and \
            any(r["scheme"] == "logo" for r in stratum):
        chosen += [r for r in cat if r["scheme"] == "loso" and r["new_source"]]
        basis += " + other GPUs' out-of-source"
    return chosen, basis, steps


def _select(res, category, gpu, precision, num_gpus, axes) -> tuple[list, str, list[str]]:
    """(residuals, basis, why-it-is-a-step-away notes); residuals empty when far outside."""
    cat = [r for r in res if r["category"] == category]
    own = [r for r in cat if r["scheme"] in ("logo", "fixed")]
    on_gpu = [r for r in cat if r["gpu"] == gpu and r["scheme"] != "unseen_gpu"]
    label = category.replace("_step_time", "")
    if on_gpu:
        chosen, basis, steps = _known_gpu(cat, on_gpu, precision, label, gpu)
        ref = [r for r in own if r["gpu"] == gpu]
    else:
        chosen = [r for r in cat if r["scheme"] == "unseen_gpu"]
        basis = f"{label}, unseen GPU (constants from another GPU)"
        steps, ref = [f"{gpu} has no validated {label} case"], own
    new_axes = [a for a in AXES if axes.get(a, 1) > 1
                and not any(r["axes"].get(a, 1) > 1 for r in ref)]
    if new_axes:
        steps.append("parallel axis " + ", ".join(a.upper() for a in new_axes)
                     + f" not in any validated {label} plan")
        chosen = chosen + [r for r in cat if r["scheme"] == "loso" and r["new_source"]
                           and r not in chosen]
    lo = min((r["num_gpus"] for r in ref), default=num_gpus)
    hi = max((r["num_gpus"] for r in ref), default=num_gpus)
    ratio = max(num_gpus / hi, lo / num_gpus)
    if ratio > SCALE_STEP:
        steps.append(f"{num_gpus} GPUs, validated {lo}-{hi}")
    if len(steps) > 1 or ratio > FAR_SCALE or not chosen:
        return [], basis, steps
    return chosen, basis, steps


def interval(step_time_s: float, category: str, gpu: str, precision: str, num_gpus: int,
             axes: dict[str, int], coverage: float = COVERAGE,
             path: str | Path = RESIDUALS) -> Interval:
    """The ``coverage`` interval of a predicted step time (s) for a plan described by its
    category (``dense_step_time`` / ``moe_step_time``), GPU name, precision, GPU count and
    parallel degrees (``tp pp cp ep vp``)."""
    q, basis, notes = _band(str(path), category, gpu, precision, num_gpus,
                            tuple(axes.items()), coverage)
    if q is None:
        return Interval(None, None, coverage, basis, notes)
    return Interval(step_time_s * math.exp(-q), step_time_s * math.exp(q), coverage, basis,
                    notes)


@lru_cache(maxsize=1024)
def _band(path: str, category: str, gpu: str, precision: str, num_gpus: int,
          axes: tuple[tuple[str, int], ...], coverage: float
          ) -> tuple[float | None, str, tuple[str, ...]]:
    """(log half-width, or None for no interval; basis; notes): everything of
    :func:`interval` but the step time, once per kind of plan (a sweep asks again and
    again for the same few)."""
    res = load_residuals(path)
    if not res:
        return None, "", ("no cross-validation residuals shipped",)
    chosen, basis, steps = _select(res, category, gpu, precision, num_gpus, dict(axes))
    if not chosen:
        return None, basis, (
            "far outside the validated space (" + "; ".join(steps) + "): no error bar",)
    q = conformal_q([r["error"] for r in chosen], coverage)
    notes = tuple(f"interval widened: {s}" for s in steps)
    return q, f"{basis}, {len(chosen)} cross-validated residuals", notes
