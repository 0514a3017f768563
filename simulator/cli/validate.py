"""``clustersim validate``: predict every published case, write the accuracy report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..validation.cases import CATEGORIES, DEFAULT_DIR, load_cases
from ..validation.report import check_bars, run_cases, summarize, write_report

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


def run(args: argparse.Namespace) -> int:
    cases = load_cases(args.cases, args.category)
    rows = run_cases(cases)
    out = Path(args.out)
    figures = []
    if not args.no_figures:
        from ..validation.figures import write_figures

        figures = write_figures(rows, args.figures or out.parent / "figures")
    analysis = Path(args.cases) / "analysis.md"
    write_report(rows, out, [str(f) for f in figures], analysis)
    summary = summarize(rows)
    for cat, s in summary.items():
        a, h = s["all"], s["held-out"]
        sys.stdout.write(f"{cat:<18} {a['n']:3d} cases  median {a['median']:6.1%}  "
                         f"max {a['max']:6.1%}  (held-out {h['n']}: median "
                         f"{h['median']:.1%}, max {h['max']:.1%})\n")
    broken = check_bars(summary)
    for line in broken:
        sys.stdout.write(f"bar broken: {line}\n")
    sys.stdout.write(f"wrote {out}" + "".join(f", {f}" for f in figures) + "\n")
    return 1 if (broken and args.check) else 0
