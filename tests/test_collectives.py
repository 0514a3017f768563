"""Collective cost models: hand-computed formulas, properties, uneven all-to-all, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli.main import main
from simulator.collectives import (
    OPS,
    alltoall_time_uneven,
    available_algorithms,
    best_algorithm,
    bus_bandwidth,
    collective_time,
)
from simulator.config import load_topology
from simulator.errors import ConfigError
from simulator.hardware import GPU, Tier, Topology

GB, US = 1e9, 1e-6


def make_tier(name: str, size: int, bw_GBps: float, lat_us: float, eff: float = 1.0,
              nvls: float | None = None, a2a: float | None = None, half_MB: float = 0.0,
              oversub: float = 1.0) -> Tier:
    return Tier(name=name, size=size, bandwidth=bw_GBps * GB, latency_s=lat_us * US,
                efficiency=eff, oversubscription=oversub,
                nvls_busbw=nvls * GB if nvls else None, alltoall_efficiency=a2a or eff,
                half_bandwidth_bytes=half_MB * 1e6, curve_exponent=0.8)


GPU0 = GPU(name="toy", peak_flops={"bf16": 1e15}, hbm_bytes=80 * GB, hbm_bandwidth=3e12,
           gemm_efficiency=0.8, gemm_half_dim=96, fp8_gemm_efficiency=0.7,
           attention_efficiency=0.5, memory_bandwidth_efficiency=0.9, kernel_overhead_s=4e-6,
           framework_memory_bytes=3 * GB)

# 8 GPUs per node at 100 GB/s (2 us per step), nodes joined by 10 GB/s NICs (5 us).
TOY = Topology(name="toy", gpu=GPU0, tiers=(
    make_tier("nvlink", 8, 100, 2, a2a=0.5), make_tier("net", 1024, 10, 5)))
S = 64e6  # bytes


def test_ring_all_reduce_hand_computed():
    n, B, alpha = 8, 100 * GB, 2 * US
    expected = 2 * (n - 1) / n * S / B + 2 * (n - 1) * alpha
    assert collective_time("all_reduce", S, TOY.place(8), TOY, "ring") == pytest.approx(expected)


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
def test_reduce_scatter_all_gather_hand_computed(op):
    n, B, alpha = 4, 100 * GB, 2 * US
    expected = (n - 1) / n * S / B + (n - 1) * alpha
    assert collective_time(op, S, TOY.place(4), TOY) == pytest.approx(expected)


def test_multi_node_ring_aggregates_local_nics():
    # 16 ranks = 2 nodes x 8: bottleneck min(100, 8 x 10) = 80 GB/s, alpha = 5 us.
    n, B, alpha = 16, 80 * GB, 5 * US
    expected = 2 * (n - 1) / n * S / B + 2 * (n - 1) * alpha
    assert collective_time("all_reduce", S, TOY.place(16), TOY, "ring") == pytest.approx(expected)
    # stride 8: one member per node, one NIC each.
    expected_strided = 2 * (4 - 1) / 4 * S / (10 * GB) + 2 * 3 * alpha
    got = collective_time("all_reduce", S, TOY.place(4, 8), TOY, "ring")
    assert got == pytest.approx(expected_strided)


def test_hierarchical_is_three_rings():
    place = TOY.place(16)  # local 8, 2 domains
    rs = 7 / 8 * S / (100 * GB) + 7 * 2 * US
    ar = 2 * 1 / 2 * (S / 8) / (10 * GB) + 2 * 1 * 5 * US
    expected = rs + ar + rs
    got = collective_time("all_reduce", S, place, TOY, "hierarchical")
    assert got == pytest.approx(expected)


def test_tree_hand_computed():
    place = TOY.place(32)  # 4 nodes
    expected = 2 * S / (80 * GB) + 2 * 5 * (5 * US)
    assert collective_time("all_reduce", S, place, TOY, "tree") == pytest.approx(expected)


def test_a_group_that_fills_one_domain_and_part_of_another_may_use_the_tree():
    # 12 contiguous ranks on 8-GPU nodes touch two nodes (as 128 ranks touch two NVL72
    # racks): the inter-node tree and the two-level algorithm apply, and for a small
    # buffer either beats the ring's 2(n-1) = 22 latency steps of 5 us.
    place = TOY.place(12)
    assert place.domains == 2
    assert available_algorithms("all_reduce", place, TOY) == ["ring", "tree", "hierarchical"]
    tree = 2 * 4096 / (80 * GB) + 2 * 4 * (5 * US)
    assert collective_time("all_reduce", 4096, place, TOY, "tree") == pytest.approx(tree)
    ring = collective_time("all_reduce", 4096, place, TOY, "ring")
    assert ring > 22 * 5 * US > tree >= collective_time("all_reduce", 4096, place, TOY)


def test_send_recv_uses_one_link_of_the_crossed_tier():
    intra = TOY.place(2, 1)
    inter = TOY.place(2, 8)
    assert collective_time("send_recv", S, intra, TOY) == pytest.approx(2 * US + S / (100 * GB))
    assert collective_time("send_recv", S, inter, TOY) == pytest.approx(5 * US + S / (10 * GB))


def test_all_to_all_intra_and_mixed():
    n = 8
    intra = (n - 1) / n * S / (50 * GB) + (n - 1) * 2 * US
    assert collective_time("all_to_all", S, TOY.place(8), TOY) == pytest.approx(intra)
    n = 16  # 7/15 of the traffic over NVLink at 50 GB/s, 8/15 over one 10 GB/s NIC
    send = (n - 1) / n * S
    expected = max(send * 7 / 15 / (50 * GB), send * 8 / 15 / (10 * GB)) + 15 * 5 * US
    assert collective_time("all_to_all", S, TOY.place(16), TOY) == pytest.approx(expected)


@pytest.mark.parametrize("op", OPS)
def test_group_of_one_costs_nothing(op):
    assert collective_time(op, S, TOY.place(1), TOY) == 0.0


def test_nvls_only_where_the_tier_has_it():
    nvl = Topology(name="nvl", gpu=GPU0, tiers=(make_tier("nvlink", 8, 100, 2, nvls=150),
                                                 make_tier("net", 64, 10, 5)))
    assert "nvls" in available_algorithms("all_reduce", nvl.place(8), nvl)
    assert "nvls" not in available_algorithms("all_reduce", nvl.place(16), nvl)
    assert "nvls" not in available_algorithms("all_reduce", TOY.place(8), TOY)
    expected = 2 * 7 / 8 * S / (150 * GB) + 14 * 2 * US
    assert collective_time("all_reduce", S, nvl.place(8), nvl) == pytest.approx(expected)
    assert best_algorithm("all_reduce", S, nvl.place(8), nvl) == "nvls"


def test_bad_inputs_raise_config_error():
    with pytest.raises(ConfigError):
        collective_time("broadcast", S, TOY.place(8), TOY)
    with pytest.raises(ConfigError):
        collective_time("all_reduce", S, TOY.place(8), TOY, "nvls")
    with pytest.raises(ConfigError):
        collective_time("all_reduce", S, TOY.place(8), TOY, "magic")
    with pytest.raises(ConfigError):
        collective_time("all_reduce", -1, TOY.place(8), TOY)


def test_bus_bandwidth_definitions():
    assert bus_bandwidth("all_reduce", 8e9, 8, 1.0) == pytest.approx(8e9 * 14 / 8)
    assert bus_bandwidth("all_gather", 8e9, 8, 1.0) == pytest.approx(8e9 * 7 / 8)
    assert bus_bandwidth("send_recv", 8e9, 2, 2.0) == pytest.approx(4e9)


# --- properties -----------------------------------------------------------------------------

sizes = st.floats(min_value=1.0, max_value=1e10)
ops = st.sampled_from(OPS)
groups = st.sampled_from([(2, 1), (8, 1), (4, 2), (16, 1), (32, 1), (4, 8), (64, 2)])


def _curvy(scale: float) -> Topology:
    return Topology(name="curvy", gpu=GPU0, tiers=(
        make_tier("nvlink", 8, 100 * scale, 2, nvls=140 * scale, half_MB=16, a2a=0.6),
        make_tier("net", 1024, 10 * scale, 5, half_MB=24)))


@settings(max_examples=150, deadline=None)
@given(op=ops, nbytes=sizes, group=groups, factor=st.floats(min_value=1.0, max_value=8.0))
def test_more_bandwidth_never_slower(op, nbytes, group, factor):
    slow, fast = _curvy(1.0), _curvy(factor)
    place = slow.place(*group)
    assert collective_time(op, nbytes, place, fast) <= collective_time(op, nbytes, place, slow) \
        * (1 + 1e-12)


SHIPPED = {name: Topology.from_config(load_topology(name))
           for name in ("dgx-a100", "dgx-h100", "gb200-nvl72")}


@settings(max_examples=200, deadline=None)
@given(op=ops, nbytes=sizes, group=groups, grow=st.floats(min_value=1.0, max_value=100.0),
       which=st.sampled_from(["curvy", *SHIPPED]))
def test_larger_message_never_faster(op, nbytes, group, grow, which):
    topo = SHIPPED.get(which) or _curvy(1.0)
    place = topo.place(*group)
    small = collective_time(op, nbytes, place, topo)
    assert collective_time(op, nbytes * grow, place, topo) >= small * (1 - 1e-12)


@settings(max_examples=150, deadline=None)
@given(op=st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"]), nbytes=sizes,
       group=groups)
def test_best_algorithm_never_slower_than_ring(op, nbytes, group):
    topo = _curvy(1.0)
    place = topo.place(*group)
    best = collective_time(op, nbytes, place, topo)
    assert best <= collective_time(op, nbytes, place, topo, "ring")
    algo = best_algorithm(op, nbytes, place, topo)
    assert collective_time(op, nbytes, place, topo, algo) == best


# --- uneven all-to-all ----------------------------------------------------------------------

@pytest.mark.parametrize("group", [(8, 1), (64, 1), (16, 2)])
def test_uniform_uneven_alltoall_matches_collective(group):
    topo = _curvy(1.0)
    place = topo.place(*group)
    n = place.size
    per_rank = np.full(n, (n - 1) / n * S)
    got = alltoall_time_uneven(per_rank, per_rank, place, topo)
    assert got == pytest.approx(collective_time("all_to_all", S, place, topo))


def test_busiest_rank_sets_the_alltoall_time():
    topo = _curvy(1.0)
    place = topo.place(64)
    rng = np.random.default_rng(0)
    send = rng.uniform(1e6, 5e6, 64)
    recv = rng.uniform(1e6, 5e6, 64)
    base = alltoall_time_uneven(send, recv, place, topo)
    hot = recv.copy()
    hot[17] = 4 * max(send.max(), recv.max())
    slower = alltoall_time_uneven(send, hot, place, topo)
    only_hot = alltoall_time_uneven(np.zeros(64), np.where(np.arange(64) == 17, hot[17], 0.0),
                                    place, topo)
    assert slower > base
    assert slower == pytest.approx(only_hot)
    with pytest.raises(ConfigError):
        alltoall_time_uneven(send[:3], recv, place, topo)


# --- CLI ------------------------------------------------------------------------------------

def test_cli_table(capsys):
    rc = main(["collective", "--topology", "dgx-h100", "--op", "all_reduce", "--ranks", "8"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "busbw (GB/s)" in out and "algbw (GB/s)" in out and "nvls" in out
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert rows[0].split()[0] == "8" and rows[-1].split()[0] == str(8 * 1024**3)


def test_cli_json(capsys):
    rc = main(["collective", "-t", "dgx-a100", "--op", "all_gather", "--ranks", "16",
               "-b", "1M", "-e", "4M", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["bytes"] for r in data["rows"]] == [2**20, 2**21, 2**22]
    assert data["rows"][0]["count"] == 2**19


@pytest.mark.parametrize("argv", [["--ranks", "0"], ["--ranks", "99999"],
                                  ["--ranks", "8", "--op", "bcast"],
                                  ["--ranks", "8", "--algo", "tree"],
                                  ["--ranks", "8", "-b", "lots"]])
def test_cli_bad_values_exit_2_with_one_line(capsys, argv):
    rc = main(["collective", "--topology", "dgx-h100", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("clustersim: error:")

