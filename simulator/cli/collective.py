"""``clustersim collective``: an nccl-tests-style table of one collective's predicted cost.

Sizes double from ``--min-bytes`` to ``--max-bytes`` (suffixes K, M, G are
powers of 1024, as in nccl-tests ``-b``/``-e``); each row gives the time,
algbw and busbw (nccl-tests doc/PERFORMANCE.md definitions) and the
algorithm the model's tuner picked.
"""

from __future__ import annotations

import argparse
import json
import re

from ..collectives import ALGOS, OPS, algo_bandwidth, best_algorithm, bus_bandwidth, collective_time
from ..config import load_topology
from ..errors import ConfigError
from ..hardware import Topology
from .common import TOPOLOGY_HELP, add_format_argument, emit, output_format

NAME = "collective"
HELP = "predict an NCCL collective's time and bus bandwidth over message sizes"

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
BF16_BYTES = 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", "-t", required=True, help=TOPOLOGY_HELP)
    p.add_argument("--op", default="all_reduce", help=f"one of {', '.join(OPS)}")
    p.add_argument("--ranks", "-n", type=int, required=True, help="group size")
    p.add_argument("--stride", type=int, default=1, help="global-rank distance between members")
    p.add_argument("--algo", default=None, help=f"force one of {', '.join(ALGOS)}")
    p.add_argument("--min-bytes", "-b", default="8", help="smallest size (e.g. 8, 1M)")
    p.add_argument("--max-bytes", "-e", default="8G", help="largest size (e.g. 8G)")
    add_format_argument(p, ("table", "json"))


def parse_size(text: str, field: str) -> int:
    """``"8"``, ``"64K"``, ``"1M"``, ``"8G"`` (binary units) -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ConfigError(field, text, "expected a byte count such as 8, 64K, 1M or 8G")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value < 1:
        raise ConfigError(field, text, "must be at least 1 byte")
    return value


def _validate(args: argparse.Namespace, topo: Topology) -> tuple[int, int]:
    if args.op not in OPS:
        raise ConfigError("--op", args.op, f"must be one of {', '.join(OPS)}")
    if args.algo is not None and args.algo not in ALGOS:
        raise ConfigError("--algo", args.algo, f"must be one of {', '.join(ALGOS)}")
    if args.stride < 1:
        raise ConfigError("--stride", args.stride, "must be >= 1")
    if args.ranks < 1 or args.ranks * args.stride > topo.max_gpus:
        raise ConfigError("--ranks", args.ranks,
                          f"must be >= 1 and ranks x stride <= {topo.max_gpus} "
                          f"(GPUs in {topo.name})")
    lo = parse_size(args.min_bytes, "--min-bytes")
    hi = parse_size(args.max_bytes, "--max-bytes")
    if hi < lo:
        raise ConfigError("--max-bytes", args.max_bytes, f"must be >= --min-bytes ({lo})")
    return lo, hi


def rows(args: argparse.Namespace, topo: Topology) -> list[dict]:
    """One dict per doubling size: bytes, count, time_us, algbw_GBps, busbw_GBps, algorithm."""
    lo, hi = _validate(args, topo)
    place = topo.place(args.ranks, args.stride)
    out, size = [], lo
    while size <= hi:
        t = collective_time(args.op, size, place, topo, args.algo)
        algo = args.algo or best_algorithm(args.op, size, place, topo)
        out.append({"bytes": size, "count": size // BF16_BYTES, "time_us": t * 1e6,
                    "algbw_GBps": algo_bandwidth(size, t) / 1e9,
                    "busbw_GBps": bus_bandwidth(args.op, size, args.ranks, t) / 1e9,
                    "algorithm": algo})
        size *= 2
    return out


def format_table(data: list[dict], title: str) -> str:
    head = f"{'size (B)':>12} {'count':>12} {'time (us)':>11} {'algbw (GB/s)':>13} " \
           f"{'busbw (GB/s)':>13}  algorithm"
    lines = [title, head]
    for r in data:
        lines.append(f"{r['bytes']:>12d} {r['count']:>12d} {r['time_us']:>11.2f} "
                     f"{r['algbw_GBps']:>13.2f} {r['busbw_GBps']:>13.2f}  {r['algorithm']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    topo = Topology.from_config(load_topology(args.topology))
    data = rows(args, topo)
    if output_format(args) == "json":
        emit(args, json.dumps({"topology": topo.name, "op": args.op, "ranks": args.ranks,
                               "stride": args.stride, "rows": data}, indent=2) + "\n")
    else:
        emit(args, format_table(data, f"# {args.op} on {args.ranks} ranks (stride "
                                      f"{args.stride}) of {topo.name}; bf16 elements") + "\n")
    return 0
