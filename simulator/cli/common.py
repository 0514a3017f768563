"""Arguments shared by subcommands: workload, topology, --set overrides."""

from __future__ import annotations

import argparse
from typing import Any

from ..config import parse_override


def add_config_arguments(p: argparse.ArgumentParser, workload: bool = True) -> None:
    if workload:
        p.add_argument("workload", help="workload YAML path or shipped name (e.g. llama3-8b)")
    p.add_argument("--topology", "-t", required=True,
                   help="topology YAML path or shipped name (dgx-a100, dgx-h100, gb200-nvl72)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a workload field, e.g. parallelism.tensor=4 (repeatable)")
    p.add_argument("--set-topology", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a topology field, e.g. tiers.1.bandwidth_GBps=100")


def overrides(items: list[str]) -> dict[str, Any]:
    return dict(parse_override(i) for i in items)
