"""Context parallelism: causal ring imbalance, overlap limits, Ulysses volume, CP=1 identity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator import ConfigError, simulate
from simulator.hardware import Topology
from simulator.workload.context import block_work, ring_attention, ring_replay, ulysses_volume

LONG = {"parallelism.context": 4, "parallelism.data": 1, "parallelism.tensor": 2,
        "parallelism.pipeline": 1, "model.seq_length": 32768,
        "training.global_batch_size": 2, "training.micro_batch_size": 1}


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
def test_contiguous_causal_imbalance_is_2p_minus_1_over_p(p):
    work = block_work(p, zigzag=False).sum(axis=1)
    assert np.allclose(work, np.arange(p) + 0.5)  # rank r: r full blocks + half diagonal
    assert work.max() / work.mean() == pytest.approx((2 * p - 1) / p)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_zigzag_evens_the_work(p):
    work = block_work(p, zigzag=True).sum(axis=1)
    assert work.max() / work.mean() == pytest.approx(1.0)
    assert work.sum() == pytest.approx(block_work(p, zigzag=False).sum())


def test_ring_replay_limits_by_hand():
    p = 4
    compute = np.full((p, p), 2.0)
    finish, per_rank = ring_replay(compute, hop=1e-9)
    assert finish.max() == pytest.approx(8.0)  # fast links: compute alone
    finish, _ = ring_replay(compute, hop=100.0)
    assert finish.max() == pytest.approx(3 * 100.0 + 2.0)  # slow links: 3 hops + last block
    assert np.allclose(per_rank, 8.0)


def _topo(h100: Topology, bw_scale: float) -> Topology:
    tiers = tuple(dataclasses.replace(t, bandwidth=t.bandwidth * bw_scale, latency_s=0.0)
                  for t in h100.tiers)
    return dataclasses.replace(h100, tiers=tiers)


def test_ring_attention_hides_kv_on_fast_links_and_not_on_slow(h100):
    p = 8
    place_fast = h100.place(p, 1)
    full, kv = 4.0 * 8192**2 * 16 * 128, 2.0 * (8192 / p) * 4 * 128 * 2
    fast = ring_attention(full, p, kv, True, _topo(h100, 1e6), place_fast, False)
    assert fast.exposed_comm == pytest.approx(0.0, abs=1e-6)
    assert fast.critical == pytest.approx(fast.compute, rel=1e-4)
    slow = ring_attention(full, p, kv, True, _topo(h100, 1e-6), place_fast, False)
    assert slow.exposed_comm > 100 * slow.compute


def test_ulysses_volume_formula():
    qkv, out = ulysses_volume(b=1, s=8192, p=4, heads=32, groups=8, d=128)
    assert qkv == pytest.approx(8192 / 4 * (32 + 16) * 128 * 2 * 3 / 4)
    assert out == pytest.approx(8192 / 4 * 32 * 128 * 2 * 3 / 4)


def test_ulysses_degree_above_kv_heads_is_a_config_error():
    with pytest.raises(ConfigError, match="Ulysses"):
        simulate("llama3-8b", "dgx-h100", **{**LONG, "parallelism.context": 8,
                                                 "parallelism.context_parallel_algo": "ulysses"})


def test_cp1_equals_core_result():
    base = simulate("llama3-8b", "dgx-h100")
    same = simulate("llama3-8b", "dgx-h100", **{"parallelism.context": 1,
                                                "parallelism.context_parallel_algo": "ring"})
    assert same.to_dict() == base.to_dict()


def test_contiguous_ring_is_slower_than_zigzag_and_reports_imbalance():
    ring = simulate("llama3-8b", "dgx-h100", variability=False,
                    **{**LONG, "parallelism.context_parallel_algo": "ring"})
    zig = simulate("llama3-8b", "dgx-h100", variability=False,
                   **{**LONG, "parallelism.context_parallel_algo": "ring_zigzag"})
    assert ring.imbalance["cp"] == pytest.approx(7 / 4)
    assert zig.imbalance["cp"] == pytest.approx(1.0)
    assert ring.step_time_s > zig.step_time_s
    # Inside one node the KV transfers hide behind the blocks in both layouts, so all that
    # zigzag saves is the critical rank's extra attention compute.
    assert ring.exposed_comm_s["cp"] == zig.exposed_comm_s["cp"] == 0.0
    assert ring.step_time_s - zig.step_time_s == pytest.approx(
        ring.breakdown_s["compute"] - zig.breakdown_s["compute"], rel=1e-9)


def test_cp_ring_across_nodes_exposes_more_than_inside_a_node():
    short = {**LONG, "model.seq_length": 16384}  # small blocks: transfers outlast compute
    inside = simulate("llama3-8b", "dgx-h100", **short)
    across = simulate("llama3-8b", "dgx-h100", **{**short, "parallelism.rank_order":
                                                  "tp-dp-ep-pp-cp", "parallelism.tensor": 8,
                                                  "parallelism.context": 4})
    assert inside.exposed_comm_s["cp"] == 0.0
    assert across.exposed_comm_s["cp"] > 0.0
