"""An interval on every prediction, from errors on runs no constant was fitted on.

The *pool* (``interval_pool.json`` beside this module; rebuilt by ``python -m
simulator.validation.intervals``, never by this module) holds one signed error per published
run that no constant saw: the later-release H100 tables of ``validation/scaling/``, the
Megatron-Bridge runs of ``validation/megatron_bridge/`` (and any other such set under
``validation/``), every dense case scored with its source (else its group) left out of the
refit (``cv_residuals.json``), and the MoE runs no constant was fitted on. Each record carries
what the distance below is measured on: stack (``megatron`` when a case names none), GPU,
precision, sequence length, GPU count, MoE dispatcher and pipeline schedule, and its *group*
(one model and plan family from one source: rows of one group are near twins).

For a plan, with ``e = log(predicted / measured)``:

1. *stratum*: the pool's records of the plan's stack and category (dense / MoE); with fewer
   than :data:`MIN_GROUPS` groups, the stack's records of every category, then the whole pool
   (then the half-width is at least that of the category's own records, step 3);
2. *bias*: ``b`` = the mean of the group means of ``e``, kept when it is more than two
   standard errors (of the group means) from 0, else 0;
3. *group-level split conformal* (pooled CDFs, Dunn, Wasserman and Ramdas 2022,
   "Distribution-free prediction sets for two-layer hierarchical models", JASA): scores
   ``|e - b|``, each record weighted ``1 / (n_group * G)`` so that every group counts once;
   ``q`` is the weighted ``(1 - a)(1 + 1/G)`` quantile. For ``G`` exchangeable groups the
   coverage lies in ``[1 - a, 1 - a + 1/(G + 1)]`` (Lei et al. 2018, Thm 2.2), hence
   :data:`MIN_GROUPS` = 9: below it the upper end passes 90 % and the rate is not claimed;
4. *distance*: each dimension in which the plan lies outside the stratum (a GPU with fewer
   than :data:`MIN_GPU_GROUPS` groups in it, a precision, dispatcher, schedule or stack not
   in it; a sequence length or GPU count more than
   :data:`STEP` times beyond its range) adds a variance term in quadrature,
   ``q' = sqrt(q^2 + sum (z_{1-a/2} s_d)^2)``, with ``s_d`` measured when the pool is built
   (``terms``: the error change across GPUs, precisions and scales, the release-to-release
   spread of one plan, the between-plan spread) and named in the notes;
5. the interval is ``[t e^(-b - q'), t e^(-b + q')]``. Its ``coverage`` is the nominal rate
   only inside the validated space of a stratum of at least :data:`MIN_GROUPS` groups;
   otherwise, or when the plan's GPU has fewer than :data:`MIN_GROUPS` groups in it, ``None``
   (unknown: the interval is a best estimate, a note says why). More than
   :data:`FAR_SCALE` times beyond the validated GPU counts, no interval.

Cheap: one JSON read per process, no refit, no pandas, no simulator import.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import Any

POOL = Path(__file__).with_name("interval_pool.json")
RESIDUALS = Path(__file__).with_name("cv_residuals.json")  # written by validation.crossval
COVERAGE = 0.8
MIN_GROUPS = 9
MIN_GPU_GROUPS = 2  # groups on a GPU before it sheds the gpu widening term (_distance)
STEP = 2.0  # x beyond a validated range (GPU count, sequence length): one step away
FAR_SCALE = 16.0  # x beyond the validated GPU counts: no interval
DEFAULT_STACK = "megatron"


@dataclass(frozen=True)
class Plan:
    """What the interval keys on; ``stack`` is the training software (Megatron-Core when a
    workload names none), ``schedule`` the pipeline schedule (``none`` without PP)."""

    category: str
    gpu: str
    precision: str
    num_gpus: int
    seq_length: int = 0
    dispatcher: str = ""
    schedule: str = ""
    stack: str = DEFAULT_STACK


@dataclass(frozen=True)
class Interval:
    """``low``/``high`` step time, s (None when far outside); ``coverage`` the nominal rate,
    or None where the pool cannot vouch for it; ``bias`` and ``half_width`` in log space."""

    low: float | None
    high: float | None
    coverage: float | None
    basis: str
    notes: tuple[str, ...] = ()
    bias: float = 0.0
    half_width: float | None = None


@lru_cache(maxsize=4)
def load_pool(path: str | Path = POOL) -> dict[str, Any]:
    """The committed pool (``{"records": [], "terms": {}}`` if it is missing)."""
    p = Path(path)
    if not p.is_file():
        return {"records": [], "terms": {}}
    return json.loads(p.read_text())


def log_error(r: dict) -> float:
    return math.log1p(r["error"])


def _groups(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[r["group"]].append(r)
    return out


def bias(records: list[dict]) -> float:
    """Mean of the group means of the log error when it is > 2 standard errors from 0."""
    means = [sum(map(log_error, g)) / len(g) for g in _groups(records).values()]
    if len(means) < 2:
        return 0.0
    b = sum(means) / len(means)
    sd = math.sqrt(sum((m - b) ** 2 for m in means) / (len(means) - 1))
    return b if abs(b) > 2 * sd / math.sqrt(len(means)) else 0.0


def group_quantile(records: list[dict], center: float, coverage: float = COVERAGE) -> float:
    """Pooled-CDF group conformal quantile of ``|e - center|`` (module docstring, step 3);
    the largest score when the level passes 1."""
    groups = _groups(records)
    g = len(groups)
    scored = sorted((abs(log_error(r) - center), 1.0 / (len(m) * g))
                    for m in groups.values() for r in m)
    level = min(1.0, coverage * (1 + 1 / g))
    acc = 0.0
    for s, w in scored:
        acc += w
        if acc >= level - 1e-12:
            return s
    return scored[-1][0]


def _stratum(pool: list[dict], plan: Plan) -> tuple[list[dict], str, list[str]]:
    label = plan.category.replace("_step_time", "")
    tiers = (([r for r in pool if r["stack"] == plan.stack and r["category"] == plan.category],
              f"{plan.stack} {label}"),
             ([r for r in pool if r["stack"] == plan.stack], f"{plan.stack}, every category"),
             (pool, "every stack and category"))
    for recs, basis in tiers:  # noqa: B007 (the tier found is returned)
        if len(_groups(recs)) >= MIN_GROUPS:
            break
    notes = [] if recs is tiers[0][0] else [
        f"fewer than {MIN_GROUPS} validated groups of {plan.stack} {label}: pool of {basis}"]
    return recs, basis, notes


def _groups_with(recs: list[dict], field: str, value: str) -> int:
    """How many groups of ``recs`` ran with ``field`` equal to ``value``."""
    return len(_groups([r for r in recs if r.get(field) == value]))


def _validated(label: str, count: int) -> str:
    """``label`` with how many groups validated it."""
    if not count:
        return f"{label} not validated"
    return f"{label} validated by {count} group{'s' * (count > 1)}"


def _distance(recs: list[dict], plan: Plan, terms: dict[str, float], on_gpu: int
              ) -> tuple[list[tuple[str, float]], float]:
    """(widening terms (why, sigma), GPU-count ratio beyond the validated range);
    ``on_gpu``: the groups of ``recs`` on the plan's GPU."""
    out = []
    # a stack validated by fewer groups than a stratum needs has no error of its own yet:
    # its plans borrow the pool's errors and carry the stack term (the spread of other
    # stacks' mean errors), as an unseen stack's do
    seen = _groups_with(recs, "stack", plan.stack)
    if plan.stack and seen < MIN_GROUPS:
        out.append((_validated(f"stack {plan.stack}", seen),
                    terms.get("stack", terms.get("plan", 0.0))))
    # a GPU keeps the gpu term until two groups ran on it: one group cannot tell the GPU's
    # error from its plan's (the one 8-GPU LoRA run on B200 at +1.8 % would otherwise narrow
    # every B200 interval, its long-context runs at -14 .. -16 % included)
    if plan.gpu and on_gpu < MIN_GPU_GROUPS:
        out.append((_validated(f"gpu {plan.gpu}", on_gpu),
                    terms.get("gpu", terms.get("plan", 0.0))))
    for key, field in (("precision", "precision"), ("dispatcher", "dispatcher"),
                       ("schedule", "schedule")):
        value = getattr(plan, field)
        if value and not any(r.get(field) == value for r in recs):
            out.append((f"{field} {value} not validated", terms.get(key, terms.get("plan", 0.0))))
    ratio = 1.0
    for field, key in (("seq_length", "plan"), ("num_gpus", "scale")):
        vals = [r[field] for r in recs if r.get(field)]
        x = getattr(plan, field)
        if vals and x:
            r = max(x / max(vals), min(vals) / x)
            ratio = r if field == "num_gpus" else ratio
            if r > STEP:
                out.append((f"{field} {x}, validated {min(vals)}-{max(vals)}",
                            terms.get(key, 0.0)))
    return out, ratio


def band(pool: list[dict], terms: dict[str, float], plan: Plan, coverage: float = COVERAGE
         ) -> tuple[float, float | None, float | None, str, tuple[str, ...]]:
    """(bias, log half-width or None, claimed coverage or None, basis, notes) of ``plan``
    from the records ``pool`` and the widening ``terms`` (sigmas, log)."""
    if not pool:
        return 0.0, None, None, "", ("no out-of-sample errors shipped: no interval",)
    recs, basis, notes = _stratum(pool, plan)
    on_gpu = _groups_with(recs, "gpu", plan.gpu) if plan.gpu else 0
    wide, ratio = _distance(recs, plan, terms, on_gpu)
    g = len(_groups(recs))
    if ratio > FAR_SCALE:
        return 0.0, None, None, basis, (f"far outside the validated space ({wide[-1][0]}): "
                                        "no error bar",)
    b = bias(recs)
    q = group_quantile(recs, b, coverage)
    own = [r for r in pool if r["stack"] == plan.stack and r["category"] == plan.category]
    if own and len(own) < len(recs):  # a borrowed pool: never narrower than its own errors
        q = max(q, group_quantile(own, b, coverage))
    z = NormalDist().inv_cdf(0.5 + coverage / 2)
    q = math.sqrt(q * q + sum((z * s) ** 2 for _, s in wide))
    notes += [f"interval widened: {why} (+{s:.1%} sd)" for why, s in wide]
    if 0 < on_gpu < MIN_GROUPS:
        notes.append(f"only {on_gpu} validated group{'s' * (on_gpu > 1)} on {plan.gpu}")
    claim = coverage if not notes else None
    if claim is None:
        notes.append(f"coverage unknown: outside the validated space ({g} groups)")
    text = f"{basis}: {g} groups, {len(recs)} out-of-sample runs, bias {b:+.1%}"
    return b, q, claim, text, tuple(notes)


def interval(step_time_s: float, plan: Plan, coverage: float = COVERAGE,
             path: str | Path = POOL) -> Interval:
    """The ``coverage`` interval of a predicted step time (s) for ``plan``."""
    b, q, claim, basis, notes = _band(str(path), plan, coverage)
    if q is None:
        return Interval(None, None, None, basis, notes, b, None)
    return Interval(step_time_s * math.exp(-b - q), step_time_s * math.exp(-b + q), claim,
                    basis, notes, b, q)


@lru_cache(maxsize=1024)
def _band(path: str, plan: Plan, coverage: float):
    """:func:`band` on the committed pool, once per kind of plan (a sweep asks again and
    again for the same few)."""
    doc = load_pool(path)
    return band(doc["records"], doc.get("terms", {}), plan, coverage)
