"""Calibration: every measured NCCL bus bandwidth is predicted within 3% by the topology files.

The README and the topology sources claim "every measured point within 3%"; this is the bar
that enforces it (it was 15 % while the claim said 3 %; the largest error today is 2.9 %,
Azure H100 all-reduce at 512 MiB).

Cases come from ``tests/data/collectives_measured.yaml`` (a sourced copy of
``shared/validation/collectives.yaml`` with the topology and rank count each
case maps to). When the shared calibration set sits beside the checkout, its
points are checked too, so the copy cannot drift from it silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.collectives import bus_bandwidth, collective_time
from simulator.config import load_topology
from simulator.hardware import Topology

TOLERANCE = 0.03
COPY = Path(__file__).parent / "data" / "collectives_measured.yaml"
SHARED = Path(__file__).parents[1].parent / "shared" / "validation" / "collectives.yaml"


def _topology(name: str, cache: dict[str, Topology] = {}) -> Topology:  # noqa: B006
    if name not in cache:
        cache[name] = Topology.from_config(load_topology(name))
    return cache[name]


def _cases() -> list[tuple]:
    out = []
    for case in yaml.safe_load(COPY.read_text()):
        for p in case["points"]:
            out.append(pytest.param(case["topology"], case["op"], case["ranks"],
                                    case.get("algo"), p["bytes"], p["busbw_GBps"],
                                    id=f"{case['id']}-{p['bytes']}"))
    return out


def predicted_busbw(topology: str, op: str, ranks: int, algo: str | None, nbytes: int) -> float:
    topo = _topology(topology)
    seconds = collective_time(op, nbytes, topo.place(ranks), topo, algo)
    return bus_bandwidth(op, nbytes, ranks, seconds) / 1e9


@pytest.mark.parametrize(("topology", "op", "ranks", "algo", "nbytes", "measured"), _cases())
def test_measured_busbw_within_tolerance(topology, op, ranks, algo, nbytes, measured):
    got = predicted_busbw(topology, op, ranks, algo, nbytes)
    assert abs(got / measured - 1) <= TOLERANCE, f"predicted {got:.1f} vs measured {measured}"


def test_copy_matches_shared_calibration_set():
    if not SHARED.exists():
        pytest.skip("shared/validation not beside this checkout")
    shared = {c["id"]: c for c in yaml.safe_load(SHARED.read_text())}
    for case in yaml.safe_load(COPY.read_text()):
        src = shared.get(case["id"])
        if src is None or "points" not in src:
            continue
        theirs = {p["bytes"]: p["busbw_GBps"] for p in src["points"]}
        ours = {p["bytes"]: p["busbw_GBps"] for p in case["points"]}
        assert ours == theirs, case["id"]


def test_internode_plateau_and_alltoall_one_nic():
    # DGX A100 across nodes: ~192 GB/s all-reduce busbw (8 x ~24 GB/s HDR per node), while
    # all-to-all runs at about one NIC per GPU (nccl-tests #267).
    assert predicted_busbw("dgx-a100", "all_reduce", 32, None, 2**33) == pytest.approx(192, 0.15)
    a2a = predicted_busbw("dgx-a100", "all_to_all", 64, None, 2**33)
    assert 15 < a2a < 30
