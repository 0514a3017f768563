"""Validation beyond one stack: published runs of other stacks, long sequences and FP8.

Reads ``validation/stacks/*.yaml`` (the case format of ``validation/*.yaml`` plus, per
group, ``stack``, ``release`` and ``source_id``: the publication a group comes from), predicts
every case with the full simulator, and reports the error per stack, per sequence-length
band and per GPU. Nothing in ``simulator/`` or ``topologies/`` is fitted on these cases.

Cross-validation leaves whole sources out: for each left-out source, a per-stack
efficiency factor (the geometric mean of measured / predicted over the *other* sources of
the same stack; 1 where the stack has no other source) scales its predictions. The shipped
profiles carry such a factor only where this cross-validated error beats the unfitted one and
the stack's runs cover what the factor would be applied to. None does (stacks/*.yaml
``efficiency: {}``): deepspeed's would beat its unfitted error, but its runs are all 2021-22
pipeline-engine runs and the profile also prices ZeRO-3, for which no run says whether the
factor holds (the numbers: validation/analysis.md, GPT-NeoX-20B).

    python -m simulator.validation.stacks [--folder DIR] [--out reports/stacks_validation.md]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

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


def predict_all(folder: Path = FOLDER) -> list[dict]:
    """One record per case: id, group, stack, source, GPU, band, measured, predicted (s),
    the plan searched for where the group asks for the best one (``best_of``), and where
    the group lists the values its stated unknowns could have had (``plausible``), the
    error at each (``plausible``: label -> error) and the range they span with the stated
    assumption (``low``, ``high``)."""
    from .predict import best_plan
    meta = group_meta(folder)
    out = []
    for c in load_cases(folder):
        m = meta[c.group]
        pred, plan = best_plan(c)
        rec = {"id": c.id, "group": c.group, "stack": m["stack"], "release": m["release"],
               "source": m["source_id"],
               # "*": on the part the source ran on (the group's topology_overrides)
               "gpu": c.topology + ("*" if c.topology_overrides else ""), "band": band(_seq(c)),
               "measured": c.measured, "predicted": pred, "plan": plan,
               "error": pred / c.measured - 1.0}
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


def report(records: list[dict], cv: list[dict]) -> str:
    """Markdown: every case, then error per stack / band / GPU, in-sample and source-out."""
    lines = ["# Validation beyond one stack", "",
             "Generated by `python -m simulator.validation.stacks` from "
             "`validation/stacks/*.yaml`; no constant is fitted on these cases.", "",
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
    for key in ("stack", "band", "gpu"):
        lines += _table(f"By {key}", summary(records, key))
    lines += render_unknowns([(r["id"], r["error"], r) for r in records if "plausible" in r])
    lines += ["## Whole sources left out, with a per-stack factor", "",
              "No constant is fitted on these sources, so the tables above are already "
              "their source-left-out errors. Below, each source is predicted with a "
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
    args = ap.parse_args(argv)
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
