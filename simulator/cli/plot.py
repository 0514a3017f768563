"""``clustersim plot``: figures of simulated steps (PNG or SVG, by the output's extension).

Kinds (``clustersim plot KIND --help`` for each)::

    clustersim plot breakdown llama3-405b -t dgx-h100 -t gb200-nvl72 -o b.png
    clustersim plot breakdown llama3-70b llama3-70b,parallelism.pipeline_schedule=1f1b,\\
        parallelism.virtual_pipeline=null -t dgx-h100 -o b.png
    clustersim plot breakdown --csv sweep.csv -o b.svg
    clustersim plot timeline llama3-70b -t dgx-h100 --set training.global_batch_size=16 -o t.png
    clustersim plot memory llama3-405b -t dgx-h100 -o m.png
    clustersim plot scaling --csv results.csv --x num_gpus -o s.png
    clustersim plot expert-load mixtral-8x7b -t dgx-h100 -o e.png
    clustersim plot gallery            # regenerate reports/figures and reports/README.md

In ``breakdown`` each configuration is ``WORKLOAD[,FIELD=VALUE...]``: the
overrides after the commas apply to that configuration only, on top of
``--set``; every configuration is simulated on every ``--topology``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from ..errors import ConfigError
from .common import add_config_arguments, overrides, workload_overrides

NAME = "plot"
HELP = "plot step-time breakdowns, pipeline timelines, memory, scaling or expert load"


def add_arguments(p: argparse.ArgumentParser) -> None:
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    b = kinds.add_parser("breakdown", help="stacked step-time breakdown per configuration")
    b.add_argument("configs", nargs="*", metavar="WORKLOAD[,FIELD=VALUE...]",
                   help="workload path or shipped name; overrides after commas apply to "
                        "that configuration only")
    b.add_argument("--topology", "-t", action="append", default=[],
                   help="topology (repeatable: every configuration on each)")
    _sets(b)
    b.add_argument("--csv", help="plot the rows of a sweep's CSV instead")
    b.add_argument("--label", help="CSV column to name the bars with")
    for kind, text in (("timeline", "pipeline Gantt chart of one step"),
                       ("memory", "memory per GPU of each pipeline stage"),
                       ("expert-load", "tokens per expert and per EP rank of an MoE layer")):
        k = kinds.add_parser(kind, help=text)
        add_config_arguments(k)
        _output(k)
    kinds.choices["expert-load"].add_argument("--layer", type=int, default=None,
                                              help="MoE layer (default: the first)")
    kinds.choices["expert-load"].add_argument("--microbatch", type=int, default=0,
                                              help="micro-batch whose router draw to show "
                                                   "(default 0)")
    s = kinds.add_parser("scaling", help="tokens/s and MFU against GPUs (or any column)")
    s.add_argument("--csv", required=True, help="table with x, metric and label columns")
    s.add_argument("--x", default="num_gpus", help="x column (num_gpus)")
    s.add_argument("--y", action="append", default=None,
                   help="metric column, repeatable (tokens_per_s and mfu)")
    s.add_argument("--label", default="label", help="column naming the lines (label)")
    g = kinds.add_parser("gallery", help="regenerate the figure gallery under reports/")
    g.add_argument("--out", default="reports", help="gallery directory (reports)")
    for k in (b, s):
        _output(k)


def _sets(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a workload field for every configuration (repeatable)")
    p.add_argument("--set-topology", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a topology field (repeatable)")


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, metavar="FILE.png|FILE.svg",
                   help="image to write; the extension picks PNG or SVG")


def run(args: argparse.Namespace) -> int:
    from ..report import figures

    if args.kind == "gallery":
        from ..studies.gallery import build_gallery

        for path in build_gallery(Path(args.out)):
            print(path)
        return 0
    if Path(args.output).suffix.lower() not in figures.FORMATS:
        raise ConfigError("--output", args.output, "must end in .png or .svg")
    fig = {"breakdown": _breakdown, "timeline": _timeline, "memory": _memory,
           "expert-load": _expert_load, "scaling": _scaling}[args.kind](args)
    path = figures.save_figure(fig, args.output)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def read_csv(path: str) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise ConfigError("--csv", path, "no such file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError("--csv", path, f"not a readable CSV table ({exc})") from None


def _breakdown(args: argparse.Namespace):
    from ..report.breakdown import breakdown_figure, frame_from_table
    from ..report.figures import simulate_run

    if args.csv:
        if args.configs:
            raise ConfigError("--csv", args.csv, "give either a CSV or workloads, not both")
        return breakdown_figure(frame_from_table(read_csv(args.csv), args.label))
    if not args.configs or not args.topology:
        raise ConfigError("configs", args.configs,
                          "need WORKLOAD... and at least one --topology, or --csv FILE")
    base, topo_set = workload_overrides(args), overrides(args.set_topology)
    results = []
    for spec in args.configs:
        name, *items = spec.split(",")
        for topo in args.topology:
            run = simulate_run(name, topo, {**base, **overrides(items)}, topo_set)
            results.append(run.result)
    return breakdown_figure(results)


def _one(args: argparse.Namespace):
    from ..report.figures import simulate_run

    return simulate_run(args.workload, args.topology, workload_overrides(args),
                        overrides(args.set_topology))


def _timeline(args: argparse.Namespace):
    from ..report.timeline import timeline_figure

    run = _one(args)
    return timeline_figure(run.plan, run.engine, run.result)


def _memory(args: argparse.Namespace):
    from ..report.memory_plot import memory_figure_for

    return memory_figure_for(_one(args))


def _expert_load(args: argparse.Namespace):
    from ..api import resolve
    from ..report.expert_load import expert_load_figure_for

    w, _ = resolve(args.workload, args.topology, workload_overrides(args),
                   overrides(args.set_topology))
    return expert_load_figure_for(w, args.layer, args.microbatch)


def _scaling(args: argparse.Namespace):
    from ..report.scaling import scaling_figure

    ys = args.y or ["tokens_per_s", "mfu"]
    return scaling_figure(read_csv(args.csv), x=args.x, ys=ys, label=args.label)
