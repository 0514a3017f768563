"""Arguments shared by subcommands: workload, topology, --set overrides, -o, typed numbers.

Numeric options are range-checked by :func:`check_numbers` before anything
runs, so a negative count, a negative seed or a non-finite float is a
ConfigError naming the option: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from ..config import parse_override
from ..errors import ConfigError
from ..io import atomic_write_text

# the shipped topologies, named in every --topology help (tests/test_api_cli_conventions.py
# checks the list)
TOPOLOGY_HELP = ("topology YAML path or shipped name (dgx-a100, dgx-h100, h200, dgx-b200, "
                 "gb200-nvl72, gb300-nvl72; uncalibrated: h800, grand-teton-h100, dgx-b300, "
                 "mi300x, mi355x; `clustersim list` shows them)")


def add_config_arguments(p: argparse.ArgumentParser, workload: bool = True,
                         gpus: bool = True) -> None:
    if workload:
        p.add_argument("workload", help="workload YAML path or shipped name (e.g. llama3-8b)")
    p.add_argument("--topology", "-t", required=True, help=TOPOLOGY_HELP)
    if workload and gpus:
        p.add_argument("--gpus", type=int, default=None, metavar="N",
                       help="GPUs in the job: sets the data-parallel size to N / (TP x PP x "
                            "CP) of the workload (after --set); N must be a multiple of it")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a workload field, e.g. parallelism.tensor=4 (repeatable)")
    p.add_argument("--set-topology", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a topology field, e.g. tiers.1.bandwidth_GBps=100")


def add_output_argument(p: argparse.ArgumentParser, required: bool = False,
                        metavar: str = "PATH", what: str = "the result") -> None:
    """``-o/--output PATH``: in every subcommand, the file the main result goes to.

    Always written atomically through :mod:`simulator.io`; without it the result
    goes to stdout (or, for figures and traces, ``-o`` is required).
    """
    p.add_argument("-o", "--output", metavar=metavar, required=required,
                   help=f"write {what} to {metavar} (atomically: a reader never sees half "
                        "a file)")


def overrides(items: list[str]) -> dict[str, Any]:
    return dict(parse_override(i) for i in items)


def workload_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``--set`` overrides, plus ``parallelism.data`` from ``--gpus N`` when given:
    N / (TP x PP x CP) of the workload as ``--set`` leaves it; ConfigError naming
    ``--gpus`` when N is not a multiple of that or contradicts ``--set parallelism.data``."""
    sets = overrides(args.set)
    n = getattr(args, "gpus", None)
    if n is None:
        return sets
    from ..config.loader import apply_overrides, read_document

    if n < 1:
        raise ConfigError("--gpus", n, "a number of GPUs >= 1")
    doc = apply_overrides(read_document(args.workload, "workloads")[0], sets)
    par = doc.get("parallelism") if isinstance(doc.get("parallelism"), dict) else {}
    sizes = [par.get(k) or 1 for k in ("tensor", "pipeline", "context")]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in sizes):
        return sets  # the workload's own validation names the bad field
    tp, pp, cp = sizes
    per = tp * pp * cp
    if n % per:
        raise ConfigError("--gpus", n, f"must be a multiple of TP x PP x CP = {tp} x {pp} x "
                          f"{cp} = {per} (the data-parallel size is N / {per}); or --set "
                          "parallelism.tensor/pipeline/context")
    if sets.get("parallelism.data", n // per) != n // per:
        raise ConfigError("--gpus", n, f"gives data-parallel size {n // per}, but --set "
                          f"parallelism.data={sets['parallelism.data']}; give one of them")
    return {**sets, "parallelism.data": n // per}


def check_numbers(args: argparse.Namespace, **limits: str) -> None:
    """Refuse out-of-range numeric options with a ConfigError naming the option.

    ``limits`` maps an attribute of ``args`` to ``"positive"`` (finite, > 0) or
    ``"nonnegative"`` (finite, >= 0); ``None`` (option not given) passes.
    Checked after parsing, so the error goes through the one ConfigError path
    (one line, exit 2) like every other bad input.
    """
    for attr, rule in limits.items():
        value = getattr(args, attr)
        if value is None:
            continue
        ok = math.isfinite(value) and (value > 0 if rule == "positive" else value >= 0)
        if not ok:
            option = "--" + attr.replace("_", "-")
            raise ConfigError(option, value, "must be a finite number "
                              + ("> 0" if rule == "positive" else ">= 0"))


# -o's extension -> the format it names (a table is plain text)
EXTENSIONS = {"json": "json", "csv": "csv", "txt": "table", "text": "table"}


def add_format_argument(p: argparse.ArgumentParser, choices: tuple[str, ...],
                        default: str = "table") -> None:
    """``--format`` and ``-o/--output``: the format defaults to ``-o``'s extension when it
    names one of ``choices`` (``-o r.json``), else to ``default``; an extension naming
    another format (``-o r.png``, ``-o r.csv`` where there is no CSV) is refused."""
    exts = ", ".join(f".{e}" for e, f in EXTENSIONS.items() if f in choices)
    p.add_argument("--format", choices=choices, default=None,
                   help=f"output format (default: from -o's extension, else {default})")
    add_output_argument(p, what=f"the result ({exts}, or no extension for the default)")
    p.set_defaults(_formats=choices, _format_default=default)


def check_extension(path: str | None, allowed: dict[str, str], option: str = "--output") -> str:
    """The format ``path``'s extension names among ``allowed`` (extension -> format; ``""``
    for a name without one), else a ConfigError listing the allowed extensions."""
    if path is None:
        return allowed.get("", "")
    ext = Path(path).suffix.lstrip(".").lower()
    if ext in allowed:
        return allowed[ext]
    listed = ", ".join(f".{e}" for e in allowed if e) or "none"
    raise ConfigError(option, path, f"the extension {'.' + ext if ext else '(none)'} names no "
                      f"format this command writes; use {listed}"
                      + (" or a name without extension" if "" in allowed else ""))


def output_format(args: argparse.Namespace) -> str:
    """The format asked for, else the one ``-o``'s extension names, else the default.

    An extension that names no format of this command is an error (``-o r.png`` would
    otherwise hold a text table); so is one contradicting ``--format``."""
    if not args.output:
        return args.format or args._format_default
    allowed = {e: f for e, f in EXTENSIONS.items() if f in args._formats}
    implied = check_extension(args.output, {"": "", **allowed})
    if args.format and implied and implied != args.format:
        raise ConfigError("--output", args.output, f"its extension names {implied} but "
                          f"--format is {args.format}; make them agree")
    return args.format or implied or args._format_default


def emit(args: argparse.Namespace, text: str) -> None:
    """The command's output: to ``-o PATH`` atomically if given, else to stdout."""
    if args.output:
        atomic_write_text(args.output, text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def add_search_space_arguments(p: argparse.ArgumentParser, micro_batch_sizes: str) -> None:
    """The plan-search options ``search`` and ``capacity`` share: micro-batch sizes to try
    (default ``micro_batch_sizes``), the largest context-parallel degree, the simulation cap."""
    p.add_argument("--micro-batch-sizes", default=micro_batch_sizes, metavar="LIST",
                   help=f"micro-batch sizes to try, comma-separated (default {micro_batch_sizes})")
    p.add_argument("--max-context", type=int, default=16, metavar="CP",
                   help="largest context-parallel degree to try (default 16)")
    p.add_argument("--max-simulations", type=int, default=2000, metavar="N",
                   help="cap on simulations per search (default 2000)")


def positive_ints(text: str, option: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; an empty entry (``8,,16``), a fraction, a word or a
    value below 1 is a :class:`ConfigError` naming ``option``."""
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise ConfigError(option, text, "expected positive integers separated by single "
                          "commas, e.g. 1,2,4")
    return sizes
