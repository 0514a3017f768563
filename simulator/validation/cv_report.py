"""The cross-validated section of ``reports/validation.md``, from the residual file.

Reads what :mod:`~simulator.validation.crossval` wrote (``simulator/metrics/
cv_residuals.json``) and summarises |error| per category, GPU and precision for each scheme
beside the in-sample error of the same cases (the shipped constants, fitted with those cases
in). The cross-validated dense error is the accuracy the project quotes, and :data:`CV_BARS`
are the bars ``tests/test_crossval.py`` enforces on it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..metrics.uncertainty import RESIDUALS

# Bars on the leave-one-group-out |error| (tests/test_crossval.py enforces the same).
CV_BARS = {"dense_step_time": {"median": 0.05, "max": 0.15}}
SCHEMES = ("logo", "loso", "unseen_gpu", "fixed")
SCHEME_TITLES = {"logo": "leave one group out", "loso": "leave one source out",
                 "unseen_gpu": "unseen GPU (another GPU's constants)",
                 "fixed": "no refitted constants (as is; cases a constant was fitted on "
                          "excluded)"}


def load(path: str | Path = RESIDUALS) -> dict:
    return json.loads(Path(path).read_text())


def stats(errors: list[float]) -> dict[str, float]:
    a = [abs(e) for e in errors]
    if not a:
        return {"n": 0, "median": float("nan"), "max": float("nan"), "mean": float("nan")}
    return {"n": len(a), "median": statistics.median(a), "max": max(a),
            "mean": statistics.fmean(errors)}


def select(doc: dict, scheme: str, category: str | None = None, **match) -> list[dict]:
    """Residuals of one scheme (and category, fields); in-sample "fixed" ones left out."""
    return [r for r in doc["residuals"] if r["scheme"] == scheme and not r.get("in_sample")
            and (category is None or r["category"] == category)
            and all(r[k] == v for k, v in match.items())]


def check_cv_bars(doc: dict) -> list[str]:
    """One line per cross-validated bar broken; empty when all hold."""
    broken = []
    for cat, bars in CV_BARS.items():
        s = stats([r["error"] for r in select(doc, "logo", cat)])
        for stat, limit in bars.items():
            if s["n"] and s[stat] > limit:
                broken.append(f"{cat} (leave one group out): {stat} |error| {s[stat]:.1%} "
                              f"> {limit:.0%}")
    return broken


def _cell(s: dict) -> str:
    return "-" if not s["n"] else f"{s['median']:.1%} / {s['max']:.1%}"


def summary_table(doc: dict) -> list[str]:
    lines = ["| category | GPU | precision | cases | in-sample | leave one group out | leave "
             "one source out | unseen GPU | as is (not fitted) |", "|---|---|---|---|---|---|"
             "---|---|---|"]
    strata = sorted({(r["category"], r["topology"], r["precision"]) for r in doc["residuals"]})
    for cat, topo, prec in [(c, "all", "all") for c in sorted({s[0] for s in strata})] + strata:
        m = {} if topo == "all" else {"topology": topo, "precision": prec}
        cells = {s: stats([r["error"] for r in select(doc, s, cat, **m)]) for s in SCHEMES}
        ref = select(doc, "logo", cat, **m) or select(doc, "fixed", cat, **m)
        ins = stats([r["in_sample_error"] for r in ref])
        lines.append(f"| {cat} | {topo} | {prec or '-'} | {ins['n']} | {_cell(ins)} | "
                     + " | ".join(_cell(cells[s]) for s in SCHEMES) + " |")
    return lines


def folds_table(doc: dict) -> list[str]:
    lines = ["| scheme | GPU | left out | training cases | refitted constants |",
             "|---|---|---|---|---|"]
    for f in doc["folds"]:
        consts = ", ".join(f"{k.split('.', 1)[1]} {v:g}" for k, v in f["constants"].items())
        lent = ", ".join(b.split(".", 1)[1] for b in f.get("borrowed", []))
        extra = f" ({lent} from {f['donor']})" if f["donor"] else ""
        edge = f"; at bound: {', '.join(e.split('.', 1)[1] for e in f['at_edge'])}" \
            if f["at_edge"] else ""
        lines.append(f"| {f['scheme']} | {f['topology']} | {f['fold']} | {f['train_cases']} "
                     f"| {consts}{extra}{edge} |")
    return lines


def worst(doc: dict, k: int = 5) -> list[str]:
    rows = sorted(select(doc, "logo", "dense_step_time"), key=lambda r: -abs(r["error"]))[:k]
    return [f"- `{r['id']}` {r['error']:+.1%} left out (in-sample {r['in_sample_error']:+.1%})"
            for r in rows]


def render_cv_section(doc: dict) -> list[str]:
    broken = check_cv_bars(doc)
    bars = "; ".join(f"{c} {s} <= {v:.0%}" for c, b in CV_BARS.items() for s, v in b.items())
    return [
        "## Cross-validated accuracy", "",
        "The accuracy to quote. Each fold refits the GPU constants with the shipped recipe "
        "(the fit commands in `topologies/*.yaml` `sources:`) on every case except the left-out"
        " ones, then predicts those with the full simulator "
        f"(`{doc['generated_by']}`; `simulator/validation/crossval.py` says how). A group is "
        "one model and plan family from one source (its BF16 and FP8 tables leave together); "
        "a source one publication or release. Cells: median / max |error|; in-sample = the "
        "shipped constants, fitted with the case in.", "",
        *summary_table(doc), "",
        f"Bars on the leave-one-group-out error: {bars}: "
        + ("all hold." if not broken else "BROKEN: " + "; ".join(broken)), "",
        "Largest leave-one-group-out dense errors:", "", *worst(doc), "",
        "### Refitted constants per fold", "", *folds_table(doc), ""]
