"""``clustersim list``: the shipped workloads, topologies, sweeps and stacks, by name.

Any of these names can be given where a path is expected (``clustersim run
llama3-8b -t dgx-h100``, ``clustersim sweep llama3-70b-plans``), from any
working directory: a source checkout finds them at the repository root, an
installed wheel as package data (:func:`simulator.config.loader.shipped_dirs`).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..config.loader import shipped_names

NAME = "list"
HELP = "list the shipped workloads, topologies and sweeps"
KINDS = ("workloads", "topologies", "sweeps", "stacks")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", nargs="?", choices=KINDS, help="list only this kind")
    p.add_argument("--format", choices=["table", "json"], default="table",
                   help="table (default) or json (one object: kind -> names)")


def run(args: argparse.Namespace) -> int:
    names = {k: shipped_names(k) for k in KINDS if args.kind in (None, k)}
    if args.format == "json":
        sys.stdout.write(json.dumps(names, indent=2) + "\n")
        return 0
    for kind, found in names.items():
        print(f"{kind}:")
        for name in found:
            print(f"  {name}")
    return 0
