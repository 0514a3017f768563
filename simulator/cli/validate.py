"""``clustersim validate``: predict every published case, write the accuracy report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..metrics.uncertainty import POOL, RESIDUALS, load_pool
from ..validation import crossval
from ..validation.cases import CATEGORIES, DEFAULT_DIR, load_cases
from ..validation.cv_report import check_cv_bars, select, stats
from ..validation.cv_report import load as load_cv
from ..validation.report import check_bars, run_cases, summarize, write_report
from .common import check_extension

NAME = "validate"
HELP = "compare predictions with published measurements and write reports/validation.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--category", action="append", choices=CATEGORIES, default=None,
                   help="only this category (repeatable); default: all")
    p.add_argument("--cases", default=str(DEFAULT_DIR), metavar="DIR",
                   help="folder of case YAML files (default: the repository's validation/)")
    p.add_argument("-o", "--output", "--out", dest="out", default="reports/validation.md",
                   metavar="PATH", help="write the Markdown report to PATH atomically "
                                        "(default reports/validation.md)")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="folder for the PNG figures (default: figures/ beside --out)")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if an accuracy bar is broken")
    p.add_argument("--cv", action="store_true",
                   help="first rerun the cross-validation (refits per left-out group and "
                   f"source, minutes) and rewrite {RESIDUALS.name} and {POOL.name} (the "
                   "interval pool); without it the report quotes the committed files")


def _cv(args: argparse.Namespace) -> dict | None:
    """The cross-validation document: rerun with ``--cv``, else the committed file."""
    if args.cv:
        doc = crossval.run(log=lambda line: print(line, file=sys.stderr, flush=True))
        crossval.write(doc)
        return doc
    default = not args.category and Path(args.cases).resolve() == DEFAULT_DIR
    return load_cv() if RESIDUALS.is_file() and default else None


def run(args: argparse.Namespace) -> int:
    check_extension(args.out, {"": "md", "md": "md", "markdown": "md"})
    cv = _cv(args)
    cases = load_cases(args.cases, args.category)
    rows = run_cases(cases)
    out = Path(args.out)
    figures = []
    if not args.no_figures:
        from ..validation.figures import write_figures

        figures = write_figures(rows, args.figures or out.parent / "figures")
    analysis = Path(args.cases) / "analysis.md"
    pool = None
    if cv and args.cv:  # the pool holds the cross-validation's errors: rebuild it too
        from ..validation import intervals

        pool = intervals.build()
        intervals.write(pool)
    elif cv and POOL.is_file():
        pool = load_pool()
    write_report(rows, out, [str(f) for f in figures], analysis, cv, pool)
    summary = summarize(rows)
    for cat, s in summary.items():
        a, h = s["all"], s["held-out"]
        sys.stdout.write(f"{cat:<18} {a['n']:3d} cases  median {a['median']:6.1%}  "
                         f"max {a['max']:6.1%}  (held-out {h['n']}: median "
                         f"{h['median']:.1%}, max {h['max']:.1%})\n")
    broken = check_bars(summary)
    if cv:
        s = stats([r["error"] for r in select(cv, "logo", "dense_step_time")])
        sys.stdout.write(f"{'dense, left out':<18} {s['n']:3d} cases  median {s['median']:6.1%}  "
                         f"max {s['max']:6.1%}  (leave one group out: the quoted accuracy)\n")
        broken += check_cv_bars(cv)
    for line in broken:
        sys.stdout.write(f"bar broken: {line}\n")
    sys.stdout.write(f"wrote {out}" + "".join(f", {f}" for f in figures) + "\n")
    return 1 if (broken and args.check) else 0
