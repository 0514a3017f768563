"""Validation beyond one stack: published runs of other stacks, long sequences and FP8.

Reads ``validation/stacks/*.yaml`` (the case format of ``validation/*.yaml`` plus, per
group, ``stack``, ``release`` and ``source_id``: the publication a group comes from), predicts
every case with the full simulator, and reports the error per stack, per sequence-length
band and per GPU. No topology constant is fitted on these cases (:data:`FITTED_ON`).

A stack profile may ship a fitted phase-time factor (``efficiency.pipeline_engine``,
:func:`simulator.workload.plan.scale_pipeline_phases`), fitted here on that stack's runs
(:func:`fit_stack_factor`, ``--fit-stack``): the mean over its sources of each source's mean
squared log error, each source one vote. Every error this module reports for such a stack is
source-left-out: a case is predicted with the factor fitted on the stack's *other* sources
(1 where there is none), never with the shipped value its own source helped set
(:func:`left_out`). Today only deepspeed ships one (its two pipeline-engine sources:
validation/analysis.md).

The second half of the report asks the same question of every stack: each source predicted
with a per-stack factor on the whole step (the geometric mean of measured / predicted over
the stack's *other* sources; 1 where the stack has no other source). A profile ships a factor
only where this beats the unfitted error and the stack's runs cover what the factor applies
to: deepspeed's applies to pipelined runs of its pipeline engine only, not to its ZeRO-3
path, about which no run says anything.

    python -m simulator.validation.stacks [--folder DIR] [--out reports/stacks_validation.md]
    python -m simulator.validation.stacks --fit-stack deepspeed
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from ..config.stacks import load_stack
from ..errors import ConfigError
from ..io import atomic_write_text
from .cases import Case, load_cases
from .unknowns import render as render_unknowns
from .unknowns import spread

FOLDER = Path(__file__).resolve().parents[2] / "validation" / "stacks"
# Sources a shipped topology constant was fitted on: (constant, its value without them).
# Left out, such a source is predicted with the value the constant had before. Empty: no
# topology constant is fitted on these runs (B200 fused attention is the cuDNN kernel's
# measured rate, topologies/dgx-b200.yaml).
FITTED_ON: dict[str, tuple[str, float]] = {}
BANDS = ((0, 8192, "< 8K"), (8192, 32768, "8K-31K"), (32768, math.inf, ">= 32K"))


def group_meta(folder: Path = FOLDER) -> dict[str, dict]:
    """group id -> {stack, release, source_id} from the case files' group headers."""
    meta: dict[str, dict] = {}
    for path in sorted(folder.glob("*.yaml")):
        for g in yaml.safe_load(path.read_text()) or []:
            for key in ("stack", "release", "source_id"):
                if not g.get(key):
                    raise ConfigError(f"{path.name}: {g.get('group')}.{key}", g.get(key),
                                      "every group names its stack, release and source_id")
            meta[g["group"]] = {k: g[k] for k in ("stack", "release", "source_id")}
            meta[g["group"]]["best_of"] = dict(g.get("best_of") or {})
    return meta


def band(seq: int) -> str:
    """The sequence-length band of ``seq`` tokens."""
    return next(name for lo, hi, name in BANDS if lo <= seq < hi)


def _seq(case: Case) -> int:
    over = case.spec["overrides"]
    return int(over.get("model.seq_length", case.spec["workload"]["model"]["seq_length"]))


FACTOR_KEY = "efficiency.pipeline_engine"
FACTOR_BOUNDS = (1.0, 1.6)  # the search interval of a fitted factor (a slower runtime)


def shipped_factor(stack: str) -> float | None:
    """The stack profile's fitted ``efficiency.pipeline_engine``; None where it ships none."""
    return load_stack(stack).efficiency.get("pipeline_engine")


def with_factor(case: Case, value: float) -> Case:
    """``case`` with its stack's ``efficiency.pipeline_engine`` set to ``value`` (its other
    ``stack_settings`` kept)."""
    spec = copy.deepcopy(case.spec)
    work = spec["workload"]
    settings = dict((work.get("training", {}) if isinstance(work, dict) else {})
                    .get("stack_settings") or {})
    settings.update(spec["overrides"].get("training.stack_settings") or {})
    settings[FACTOR_KEY] = value
    spec["overrides"]["training.stack_settings"] = settings
    return Case(**{**case.__dict__, "spec": spec})


def _pipelined(case: Case) -> bool:
    """Whether the case runs pipeline parallelism (the only runs the factor applies to)."""
    work = case.spec["workload"]
    par = work.get("parallelism", {}) if isinstance(work, dict) else {}
    return int(case.spec["overrides"].get("parallelism.pipeline", par.get("pipeline", 1))) > 1


def _by_source(cases: list[Case], folder: Path) -> dict[str, list[Case]]:
    meta = group_meta(folder)
    out: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        out[meta[c.group]["source_id"]].append(c)
    return out


def fit_stack_factor(cases: list[Case], folder: Path = FOLDER) -> tuple[float, float]:
    """The ``efficiency.pipeline_engine`` value minimising the mean over sources of each
    source's mean squared log error over the pipelined ``cases`` (each source one vote; the
    factor does nothing to the others), and that
    objective: golden-section search over :data:`FACTOR_BOUNDS` to 0.001 (a step is close
    to linear in the factor, its phases scaling and its transfers not, so the objective has
    one minimum). (1.0, 0.0) for no cases: nothing to fit."""
    from .fit import GOLDEN, golden_section
    from .predict import predict_step_time
    groups = list(_by_source([c for c in cases if _pipelined(c)], folder).values())

    def objective(f: float) -> float:
        return statistics.fmean(statistics.fmean(
            math.log(predict_step_time(with_factor(c, f)) / c.measured) ** 2 for c in g)
            for g in groups)

    if not groups:
        return 1.0, 0.0
    lo, hi = FACTOR_BOUNDS
    steps = math.ceil(math.log(1e-3 / (hi - lo)) / math.log(GOLDEN))  # to 0.001
    best = round(golden_section(objective, lo, hi, steps), 3)
    return best, objective(best)


def left_out(cases: list[Case], folder: Path = FOLDER) -> dict[str, tuple[Case, float]]:
    """Case id -> (the case as its source is judged, the factor it carries) for every case of
    a stack that ships a fitted factor: the factor refitted on the stack's other sources (1
    without any). Cases of other stacks are not in the result."""
    meta = group_meta(folder)
    out: dict[str, tuple[Case, float]] = {}
    by_stack: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        if shipped_factor(meta[c.group]["stack"]) is not None:
            by_stack[meta[c.group]["stack"]].append(c)
    for members in by_stack.values():
        for source, own in _by_source(members, folder).items():
            train = [c for c in members if meta[c.group]["source_id"] != source]
            factor = fit_stack_factor(train, folder)[0]
            out.update({c.id: (with_factor(c, factor), factor) for c in own})
    return out


def _part(c) -> str:
    """The report's GPU column: the shipped topology, with a ``*`` where the group's
    ``topology_overrides`` state how the part its source ran on differs, and the part's name
    where they rename it (``gpu.name``: A100-SXM4-40GB on a DGX A100 node)."""
    if not c.topology_overrides:
        return c.topology
    name = c.topology_overrides.get("gpu.name")
    return f"{c.topology} ({name})*" if name else f"{c.topology}*"


def predict_all(folder: Path = FOLDER) -> list[dict]:
    """One record per case: id, group, stack, source, GPU, band, measured, predicted (s),
    the plan searched for where the group asks for the best one (``best_of``), and where
    the group lists the values its stated unknowns could have had (``plausible``), the
    error at each (``plausible``: label -> error) and the range they span with the stated
    assumption (``low``, ``high``). A case of a stack with a fitted factor is predicted with
    the factor its source left out (:func:`left_out`) and also carries that ``factor``, the
    prediction with the shipped one (``shipped``, ``shipped_error``: in-sample) and without
    any (``raw``)."""
    from .predict import best_plan, predict_step_time
    meta = group_meta(folder)
    out = []
    cases = load_cases(folder)
    judged = left_out(cases, folder)
    for c in cases:
        m = meta[c.group]
        shipped = None
        if c.id in judged:  # a fitted stack factor: judged on the one its source did not set
            shipped = predict_step_time(c)
            c, factor = judged[c.id]
        pred, plan = best_plan(c)
        rec = {"id": c.id, "group": c.group, "stack": m["stack"], "release": m["release"],
               "source": m["source_id"],
               "gpu": _part(c), "band": band(_seq(c)),
               "measured": c.measured, "predicted": pred, "plan": plan,
               "error": pred / c.measured - 1.0}
        if shipped is not None:
            rec.update({"factor": factor, "shipped": shipped,
                        "shipped_error": shipped / c.measured - 1.0,
                        "raw": predict_step_time(with_factor(c, 1.0))})
        rec.update(spread(c, pred) or {})
        out.append(rec)
    return out


def _unfitted(records: list[dict], folder: Path) -> dict[str, float]:
    """Case id -> prediction with the topology constant its source was fitted on set back
    to its value without that source (:data:`FITTED_ON`)."""
    from .predict import predict_step_time
    out: dict[str, float] = {}
    fitted = {r["id"] for r in records if r["source"] in FITTED_ON}
    if not fitted:
        return out
    meta = group_meta(folder)
    for c in load_cases(folder):
        if c.id in fitted:
            key, value = FITTED_ON[meta[c.group]["source_id"]]
            c2 = Case(**{**c.__dict__, "topology_overrides": {**c.topology_overrides,
                                                               key: value}})
            out[c.id] = predict_step_time(c2)
    return out


def fit_constant(folder: Path, source: str, key: str, grid: list[float]) -> tuple[float, float]:
    """Grid value of topology constant ``key`` minimising the mean squared log error over
    ``source``'s cases, and that error (``--fit``; how FITTED_ON's constants were set)."""
    from .predict import predict_step_time
    meta = group_meta(folder)
    cases = [c for c in load_cases(folder) if meta[c.group]["source_id"] == source]
    best = (math.inf, grid[0])
    for v in grid:
        errs = [math.log(predict_step_time(Case(**{**c.__dict__, "topology_overrides": {
            **c.topology_overrides, key: v}})) / c.measured) ** 2 for c in cases]
        best = min(best, (statistics.fmean(errs), v))
    return best[1], best[0]


def crossvalidate(records: list[dict], folder: Path = FOLDER) -> list[dict]:
    """Leave each source out; scale its predictions by its stack's factor fitted on the
    stack's other sources (geometric mean of measured / predicted; 1 without any), and
    predict a source a topology constant was fitted on without that fit (FITTED_ON)."""
    out = []
    unfit = _unfitted(records, folder)
    for source in sorted({r["source"] for r in records}):
        train = [r for r in records if r["source"] != source]
        for r in (r for r in records if r["source"] == source):
            if "factor" in r:  # its stack's own fitted factor, already left out (left_out)
                out.append({**r, "cv_predicted": r["predicted"], "cv_error": r["error"]})
                continue
            r = {**r, "predicted": unfit.get(r["id"], r["predicted"])}
            logs = [math.log(t["measured"] / t["predicted"]) for t in train
                    if t["stack"] == r["stack"]]
            factor = math.exp(statistics.fmean(logs)) if logs else 1.0
            pred = r["predicted"] * factor
            out.append({**r, "factor": factor, "cv_predicted": pred,
                        "cv_error": pred / r["measured"] - 1.0})
    return out


def summary(records: list[dict], key: str, err: str = "error") -> list[tuple]:
    """(value of ``key``, n, median |error|, signed mean, worst |error|) per value."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        groups[r[key]].append(r[err])
    rows = []
    for name, errs in sorted(groups.items()):
        absd = [abs(e) for e in errs]
        rows.append((name, len(errs), statistics.median(absd), statistics.fmean(errs),
                     max(absd)))
    return rows


def _table(title: str, rows: list[tuple]) -> list[str]:
    lines = [f"### {title}", "", "| slice | n | median abs. error | signed mean | worst |",
             "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {n} | {k} | {100 * med:.1f} % | {100 * mean:+.1f} % | {100 * worst:.1f} % |"
              for n, k, med, mean, worst in rows]
    return [*lines, ""]


def _factor_table(records: list[dict]) -> list[str]:
    """Markdown: each case of a stack with a fitted factor, predicted without it, with the
    shipped value (in-sample) and with its source left out (the error reported)."""
    rows = [r for r in records if "factor" in r]
    if not rows:
        return []
    stacks = sorted({r["stack"] for r in rows})
    lines = ["## Stack factors fitted on these runs", "",
             "A profile's `efficiency.pipeline_engine` scales every forward and backward phase "
             "of its pipelined runs (`python -m simulator.validation.stacks --fit-stack "
             "NAME`, each source one vote). Shipped: " + ", ".join(
                 f"{s} {shipped_factor(s):.3f}" for s in stacks) + ". The in-sample column is "
             "not an accuracy; the tables above use the left-out one.", "",
             "| case | without the factor | shipped factor (in-sample) | factor without its "
             "source | error, source left out |", "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['id']} | {100 * (r['raw'] / r['measured'] - 1):+.1f} % | "
              f"{100 * r['shipped_error']:+.1f} % | {r['factor']:.3f} | "
              f"{100 * r['error']:+.1f} % |" for r in rows]
    return [*lines, ""]


def report(records: list[dict], cv: list[dict]) -> str:
    """Markdown: every case, then error per stack / band / GPU, in-sample and source-out."""
    lines = ["# Validation beyond one stack", "",
             "Generated by `python -m simulator.validation.stacks` from "
             "`validation/stacks/*.yaml`. No topology constant is fitted on these cases; a "
             "stack's fitted factor is, and every error of that stack below is its source's "
             "left-out one (\"Stack factors fitted on these runs\").", "",
             "| case | stack | release | GPU | band | measured s | predicted s | error | "
             "best plan searched |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- |"]
    lines += [f"| {r['id']} | {r['stack']} | {r['release']} | {r['gpu']} | {r['band']} | "
              f"{r['measured']:.3f} | {r['predicted']:.3f} | {100 * r['error']:+.1f} % | "
              f"{r.get('plan', '')} |" for r in records]
    if any(r["gpu"].endswith("*") for r in records):
        lines += ["", "`*`: the group states how the part its source ran on differs from the "
                  "shipped topology (`topology_overrides`, with the evidence beside them: "
                  "docs/architecture.md, item 13)."]
    lines.append("")
    lines += _factor_table(records)
    for key in ("stack", "band", "gpu"):
        lines += _table(f"By {key}", summary(records, key))
    lines += render_unknowns([(r["id"], r["error"], r) for r in records if "plausible" in r])
    lines += ["## Whole sources left out, with a per-stack factor", "",
              "No topology constant is fitted on these sources, and a stack's fitted factor "
              "is judged with its source left out, so the tables above are already their "
              "source-left-out errors. Below, each source is predicted with a "
              "per-stack factor fitted on the stack's *other* sources (the geometric mean "
              "of measured / predicted): the check that decides whether a stack profile "
              "ships an `efficiency` factor (only where it beats the unfitted error and the "
              "stack's runs cover what the factor would apply to; module docstring).", ""]
    for key in ("stack", "band", "gpu", "source"):
        lines += _table(f"By {key}", summary(cv, key, "cv_error"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulator.validation.stacks",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, default=FOLDER)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    ap.add_argument("--fit", nargs=2, metavar=("SOURCE", "KEY"), default=None,
                    help="grid-fit topology constant KEY (e.g. gpu.attention_efficiency) on "
                         "SOURCE's cases over 0.20-0.70 and print it")
    ap.add_argument("--fit-stack", metavar="STACK", default=None,
                    help="fit STACK's efficiency.pipeline_engine on all its runs here (each "
                         "source one vote) and print it: how the shipped value was set")
    args = ap.parse_args(argv)
    if args.fit_stack:
        meta = group_meta(args.folder)
        cases = [c for c in load_cases(args.folder) if meta[c.group]["stack"] == args.fit_stack]
        if not cases:
            print(f"stacks: error: no run of stack {args.fit_stack!r} in {args.folder}",
                  file=sys.stderr)
            return 2
        value, err = fit_stack_factor(cases, args.folder)
        print(f"{args.fit_stack} {FACTOR_KEY} = {value} over {len(cases)} runs of "
              f"{len(_by_source(cases, args.folder))} sources (objective {err:.5f})")
        return 0
    if args.fit:
        grid = [round(0.20 + 0.01 * i, 2) for i in range(51)]
        value, err = fit_constant(args.folder, args.fit[0], args.fit[1], grid)
        print(f"{args.fit[1]} = {value} (mean squared log error {err:.5f})")
        return 0
    try:
        records = predict_all(args.folder)
    except ConfigError as exc:  # a malformed case file: one line on stderr, exit 2
        print(f"stacks: error: {exc.message()}", file=sys.stderr)
        return 2
    text = report(records, crossvalidate(records, args.folder))
    if args.out:
        atomic_write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
