"""The out-of-sample error pool behind every interval: built from runs, and its coverage.

``python -m simulator.validation.intervals`` predicts every step-time run that no constant
was fitted on and writes the pool that :mod:`simulator.metrics.uncertainty` reads
(``simulator/metrics/interval_pool.json``), then prints the coverage table. The records:

* every step-time case of each folder under ``validation/`` (:func:`external_dirs`:
  ``scaling/``, the later-release H100 tables; ``megatron_bridge/``; any set added later,
  e.g. other stacks, whose cases name ``training.stack``), predicted as is, except that a
  run of a stack with a fitted factor gets the factor refitted without its source
  (:func:`simulator.validation.stacks.left_out`);
* from the cross-validation (``cv_residuals.json``, written by
  :mod:`~simulator.validation.crossval`), one error per fitted dense case: refitted without
  its source where its GPU kept constants of its own, else without its group; and the MoE
  cases no constant was fitted on.

The widening terms (:func:`terms`, log sigmas) are measured on the records: ``release`` the
spread of one plan's measurements across releases (same group, GPUs and prediction),
``precision`` the change of the error between a BF16 table and its FP8 twin, ``scale`` the
change between a group's smallest and largest GPU count, ``plan`` the spread of group means,
``gpu`` the change when a GPU's constants come from another GPU (the cross-validation's
``unseen_gpu`` scheme); ``stack`` has no run of another stack yet, so it is the largest of the
others (an assumption until such runs are added). ``single_step`` (step-to-step spread of
one run, ``validation/step_spread/``) is reported, not added: every pool error already holds
one.

Coverage is measured leave one group out (:func:`logo_outcomes`): each group's runs are
judged by the interval built from the other groups (bias and terms re-estimated), so no run
is judged by an interval it helped make.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from ..api import resolve
from ..metrics.uncertainty import (
    COVERAGE,
    DEFAULT_STACK,
    POOL,
    RESIDUALS,
    Plan,
    band,
    log_error,
)
from .cases import DEFAULT_DIR, STEP_CATEGORIES, Case, load_cases, precision
from .crossval import _release, fold_key, source_key
from .predict import predict
from .report import write_atomic

NOT_CASE_DIRS = ("schedules", "step_spread", "collectives")  # not step-time runs


def external_dirs(root: Path = DEFAULT_DIR) -> list[Path]:
    """Folders of step-time runs no constant is fitted on (every case folder under ``root``)."""
    return sorted(d for d in root.iterdir() if d.is_dir() and d.name not in NOT_CASE_DIRS
                  and any(d.glob("*.yaml")))


def stack_of(case: Case, workload) -> str:
    """The case's ``training.stack`` (every run of another stack names its own)."""
    return str(getattr(workload.training, "stack", None) or DEFAULT_STACK)


def describe(case: Case) -> dict:
    """The :class:`~simulator.metrics.uncertainty.Plan` fields of a step-time case."""
    w, t = resolve(case.spec["workload"], case.topology, case.spec["overrides"],
                   case.topology_overrides)
    p, moe = w.parallelism, w.model.moe
    return {"category": case.category, "gpu": t.gpu.name, "precision": precision(case),
            "num_gpus": p.num_gpus, "seq_length": w.model.seq_length,
            "dispatcher": moe.token_dispatcher_type if moe else "",
            "schedule": p.pipeline_schedule if p.pipeline > 1 else "none",
            "stack": stack_of(case, w)}


def record(case: Case, predicted: float, set_name: str, cases: list[Case] = ()) -> dict:
    return {"id": case.id, "group": fold_key(case), "set": set_name, "topology": case.topology,
            "source": source_key(case, cases), "release": _release(case.source) or "",
            "measured": case.measured, "predicted": predicted,
            "error": predicted / case.measured - 1.0, **describe(case)}


def _unfitted(d: Path):
    """A case filter leaving out the groups of ``d`` a topology constant was fitted on
    (``validation/stacks``: :data:`simulator.validation.stacks.FITTED_ON`): in-sample for
    that constant, not an out-of-sample error."""
    if d.name != "stacks":
        return lambda c: True
    from .stacks import FITTED_ON, group_meta
    meta = group_meta(d)
    return lambda c: meta[c.group]["source_id"] not in FITTED_ON


def external_records(root: Path = DEFAULT_DIR, keep=lambda c: True) -> list[dict]:
    """Every step-time case of :func:`external_dirs` that ``keep`` accepts, predicted."""
    out = []
    for d in external_dirs(root):
        cases = load_cases(d, list(STEP_CATEGORIES))
        unfitted = _unfitted(d)
        judged = _left_out(d, cases)
        out += [record(c, predict(judged.get(c.id, c)), d.name, cases) for c in cases
                if keep(c) and unfitted(c)]
    return out


def _left_out(d: Path, cases: list[Case]) -> dict[str, Case]:
    """Case id -> the case with its stack's fitted factor refitted without its source
    (``validation/stacks``: :func:`simulator.validation.stacks.left_out`); empty elsewhere."""
    if d.name != "stacks":
        return {}
    from .stacks import left_out
    return {cid: case for cid, (case, _) in left_out(cases, d).items()}


def cv_records(doc: dict, cases: list[Case]) -> list[dict]:
    """One out-of-sample error per cross-validated case (module docstring)."""
    by_id = {c.id: c for c in cases}
    borrowed = {(f["scheme"], f["topology"], f["fold"]) for f in doc["folds"] if f["donor"]}
    res = doc["residuals"]
    loso = {r["id"]: r for r in res if r["scheme"] == "loso" and r["category"] in
            STEP_CATEGORIES and ("loso", r["topology"], r["fold"]) not in borrowed}
    logo = {r["id"]: r for r in res if r["scheme"] == "logo" and r["category"] in
            STEP_CATEGORIES}
    chosen = [loso.get(i, r) for i, r in logo.items()]
    chosen += [r for r in res if r["scheme"] == "fixed" and not r.get("in_sample")]
    return [{**record(by_id[r["id"]], r["predicted"], "cv" if r["scheme"] != "fixed"
                      else "moe", cases), "scheme": r["scheme"]} for r in chosen]


def _rms(xs: list[float]) -> float:
    return math.sqrt(sum(x * x for x in xs) / len(xs)) if xs else 0.0


def gpu_term(doc: dict) -> float:
    """RMS change of the log error when a GPU runs on another GPU's constants."""
    logo = {r["id"]: r for r in doc["residuals"] if r["scheme"] == "logo"}
    return _rms([math.log1p(r["error"]) - math.log1p(logo[r["id"]]["error"])
                 for r in doc["residuals"] if r["scheme"] == "unseen_gpu" and r["id"] in logo])


def terms(records: list[dict], gpu: float) -> dict[str, float]:
    """Widening sigmas (log) measured on ``records`` (module docstring)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    same_plan: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        groups[r["group"]].append(r)
        same_plan[(r["group"], r["num_gpus"], round(r["predicted"], 9))].append(log_error(r))
    release = [e - statistics.fmean(v) for v in same_plan.values() if len(v) > 1 for e in v]
    n_rel = sum(len(v) - 1 for v in same_plan.values() if len(v) > 1)
    prec, scale = [], []
    for g in groups.values():
        by_p = defaultdict(list)
        for r in g:
            by_p[r["precision"]].append(log_error(r))
        if len(by_p) > 1:
            means = [statistics.fmean(v) for v in by_p.values()]
            prec.append(max(means) - min(means))
        lo, hi = min(g, key=lambda r: r["num_gpus"]), max(g, key=lambda r: r["num_gpus"])
        if hi["num_gpus"] > lo["num_gpus"] and hi["precision"] == lo["precision"]:
            scale.append(log_error(hi) - log_error(lo))
    means = [statistics.fmean(map(log_error, g)) for g in groups.values()]
    out = {"release": math.sqrt(sum(e * e for e in release) / n_rel) if n_rel else 0.0,
           "precision": _rms(prec), "scale": _rms(scale), "gpu": gpu,
           "plan": statistics.stdev(means) if len(means) > 1 else 0.0}
    # a stack the pool has not validated (fewer groups than a stratum needs): the spread of
    # the other stacks' group means about 0 (bias included) where the pool holds runs of
    # another stack; the largest other term otherwise
    other = [m for g, m in zip(groups.values(), means, strict=True)
             if g[0].get("stack", DEFAULT_STACK) != DEFAULT_STACK]
    out["stack"] = (math.sqrt(statistics.fmean(m * m for m in other)) if len(other) >= 2
                    else max(out.values()))
    out["single_step"] = single_step()
    return out


def single_step(root: Path = DEFAULT_DIR) -> float:
    """Largest relative step-to-step standard deviation of the published example jobs."""
    runs = yaml.safe_load((root / "step_spread" / "dgxc_examples.yaml").read_text())["runs"]
    return max(r["std_s"] / r["mean_s"] for r in runs)


def build(root: Path = DEFAULT_DIR, cv_path: Path = RESIDUALS) -> dict:
    """The pool document: records, measured terms, and how it was made."""
    doc = json.loads(Path(cv_path).read_text())
    records = external_records(root) + cv_records(doc, load_cases(root))
    return {"generated_by": "python -m simulator.validation.intervals",
            "error": "predicted / measured - 1", "gpu_term_source": "cv_residuals.json",
            "terms": terms(records, gpu_term(doc)), "records": records}


def plan_of(r: dict) -> Plan:
    return Plan(r["category"], r["gpu"], r["precision"], r["num_gpus"], r["seq_length"],
                r["dispatcher"], r["schedule"], r["stack"])


def logo_outcomes(records: list[dict], gpu: float, coverage: float = COVERAGE) -> list[dict]:
    """Each run judged by the interval built without its group (bias and terms refitted)."""
    out = []
    for g in sorted({r["group"] for r in records}):
        rest = [r for r in records if r["group"] != g]
        t = terms(rest, gpu)
        for r in (r for r in records if r["group"] == g):
            b, q, claim, _, _ = band(rest, t, plan_of(r), coverage)
            e = log_error(r)
            out.append({"id": r["id"], "set": r["set"], "gpu": r["gpu"], "group": g,
                        "claimed": claim, "withheld": q is None,
                        "covered": q is not None and abs(e - b) <= q,
                        "half_width": None if q is None else math.exp(-b) * math.sinh(q)})
    return out


SET_TITLES = {"scaling": "validation/scaling (later-release H100 tables, never fitted)",
              "megatron_bridge": "validation/megatron_bridge (never fitted)",
              "mlperf": "validation/mlperf (MLPerf Training logs, never fitted)",
              "cv": "cross-validation (source, else group, left out of the refit)",
              "moe": "MoE runs no constant was fitted on",
              "stacks": "validation/stacks (other stacks, long sequence, small-model FP8; no "
                        "topology constant fitted; a stack's fitted factor refitted without "
                        "the case's source, stacks.left_out)",
              "sdpa_backends": "validation/sdpa_backends (one GPU, cuDNN and FlashAttention-2; "
                               "never fitted)"}


def coverage_stats(outcomes: list[dict]) -> dict:
    """Runs, groups, runs with an interval, achieved coverage (all intervals; and those
    that claim the nominal rate), median relative half-width."""
    given = [o for o in outcomes if not o["withheld"]]
    claimed = [o for o in given if o["claimed"] is not None]
    def rate(xs: list[dict]) -> float:
        return sum(o["covered"] for o in xs) / len(xs) if xs else float("nan")

    widths = [o["half_width"] for o in given]
    by_group: dict[str, list[dict]] = defaultdict(list)
    for o in given:
        by_group[o["group"]].append(o)
    return {"runs": len(outcomes), "groups": len({o["group"] for o in outcomes}),
            "withheld": len(outcomes) - len(given), "claimed": len(claimed),
            "achieved": rate(given), "achieved_claimed": rate(claimed),
            "achieved_group": statistics.fmean(rate(v) for v in by_group.values())
            if by_group else float("nan"),
            "median_half_width": statistics.median(widths) if widths else float("nan")}


def _row(label: str, s: dict) -> str:
    def pct(x: float, fmt: str = ".0%") -> str:
        return "-" if x != x else format(x, fmt)
    return (f"| {label} | {s['runs']} | {s['groups']} | {s['claimed']} | {s['withheld']} | "
            f"{pct(s['achieved'])} | {pct(s['achieved_group'])} | {pct(s['achieved_claimed'])} | "
            f"{pct(s['median_half_width'], '.1%')} |")


def _head(what: str) -> list[str]:
    return [f"| {what} | runs | groups | runs claiming 80 % | no interval | achieved (all "
            "intervals) | achieved, each group once | achieved (where 80 % claimed) | median "
            "half-width |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]


def render(pool: dict, coverage: float = COVERAGE) -> list[str]:
    """The coverage section of ``reports/validation.md``."""
    out = logo_outcomes(pool["records"], pool["terms"]["gpu"], coverage)
    by_set = [_row(SET_TITLES.get(k, k), coverage_stats([o for o in out if o["set"] == k]))
              for k in sorted({o["set"] for o in out})]
    by_gpu = [_row(k, coverage_stats([o for o in out if o["gpu"] == k]))
              for k in sorted({o["gpu"] for o in out})]
    t = pool["terms"]
    return ["## Interval coverage (leave one group out)", "",
            f"Every prediction's interval (nominal {coverage:.0%}) comes from the errors of runs"
            " no constant was fitted on (`simulator/metrics/uncertainty.py` says how; pool "
            f"rebuilt by `{pool['generated_by']}`). Here each group's runs are judged by the "
            "interval built from the *other* groups (bias and widening terms re-estimated), "
            "so the coverage is out of sample. 'Achieved (all intervals)' counts every run "
            "given an interval, including those outside the validated space, whose coverage "
            "the interval reports as unknown; 'each group once' averages the groups' rates (the "
            "quantity the group-level guarantee is about); half-width = (high - low) / 2 / "
            "prediction.", "",
            "Per set:", "", *_head("set"), *by_set, _row("**all**", coverage_stats(out)), "",
            "Per GPU:", "", *_head("GPU"), *by_gpu, "",
            "Widening terms (log sigma, measured on the pool): " + ", ".join(
                f"{k} {v:.1%}" for k, v in t.items()) + ". " + _stack_note(pool)
            + " `single_step` is reported, not added.", ""]


def _stack_note(pool: dict) -> str:
    others = sorted({r.get("stack", DEFAULT_STACK) for r in pool["records"]} - {DEFAULT_STACK})
    if len({r["group"] for r in pool["records"] if r.get("stack", DEFAULT_STACK) in others}) < 2:
        return "`stack` is an assumption (the largest other term: fewer than two groups of " \
               "another stack in the pool)."
    return (f"`stack` is measured on the groups of {', '.join(others)} (RMS of their mean log "
            "errors) and widens a plan of a stack with fewer validated groups than a stratum "
            "needs.")


def write(pool: dict, path: str | Path = POOL) -> None:
    write_atomic(path, json.dumps(pool, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=str(POOL))
    args = ap.parse_args(argv)
    pool = build()
    write(pool, args.output)
    print("\n".join(render(pool)))
    print(f"wrote {args.output} ({len(pool['records'])} records)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
