"""Balancing over steps, all-to-all volumes, and the ``clustersim moe-balance`` command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.cli import main as cli_main
from simulator.config import MoEConfig, load_workload
from simulator.moe import (
    RouterLoads,
    alltoall_bytes,
    alltoall_matrix,
    internode_bytes,
    rng_for,
    route,
    simulate_balancing,
    simulate_bias_balancing,
)

ROOT = Path(__file__).resolve().parents[1]
SKEWED = MoEConfig(num_experts=8, router_topk=2, router_load="skewed", router_skew=1.0,
                   capacity_factor=1.25)


def test_bias_balancing_converges_from_a_skewed_start():
    df = simulate_bias_balancing(SKEWED, 4096, 300, seed=0, gamma=0.01)
    assert list(df.columns) == ["step", "max_over_mean", "balance_loss", "dropped_fraction"]
    start, end = df.iloc[:10].mean(), df.iloc[-30:].mean()
    assert start.max_over_mean > 1.6 and start.dropped_fraction > 0.05
    # sampling noise alone gives ~1.05 for 1024 assignments per expert
    assert end.max_over_mean < 1.12
    assert end.dropped_fraction < 0.005
    assert end.balance_loss == pytest.approx(1.0, abs=0.02)
    assert (simulate_bias_balancing(SKEWED, 4096, 300, seed=0, gamma=0.01)
            .equals(df))  # deterministic


def test_no_balancing_stays_skewed_and_aux_loss_sits_between():
    none = simulate_balancing(SKEWED, 4096, 300, seed=0, strategy="none").iloc[-30:].mean()
    aux = simulate_balancing(SKEWED, 4096, 300, seed=0, strategy="aux_loss").iloc[-30:].mean()
    bias = simulate_balancing(SKEWED, 4096, 300, seed=0, gamma=0.01,
                              strategy="aux_free_bias").iloc[-30:].mean()
    assert none.max_over_mean > 1.8
    assert bias.max_over_mean < aux.max_over_mean < none.max_over_mean


def test_slower_gamma_converges_slower():
    fast = simulate_bias_balancing(SKEWED, 4096, 100, seed=1, gamma=0.02).max_over_mean
    slow = simulate_bias_balancing(SKEWED, 4096, 100, seed=1, gamma=0.002).max_over_mean
    assert fast.iloc[-10:].mean() < slow.iloc[-10:].mean()


def uniform_loads(num_experts=16, topk=2, tokens=1024) -> RouterLoads:
    m = MoEConfig(num_experts=num_experts, router_topk=topk)
    return route(m, tokens, rng_for(0))


def test_alltoall_uniform_volumes():
    ep, tokens, bpt = 8, 1024, 4096 * 2
    send, recv = alltoall_bytes(uniform_loads(), ep, tokens, bpt)
    data = tokens * 2 * bpt
    assert np.allclose(send, data * (ep - 1) / ep) and np.allclose(recv, send)
    mat = alltoall_matrix(uniform_loads(), ep, tokens, bpt)
    assert np.all(np.diag(mat) == 0) and mat.sum() == pytest.approx(send.sum())


def test_alltoall_skewed_hot_rank_receives_most():
    counts = np.array([40, 40, 10, 10, 10, 10, 10, 10])
    loads = RouterLoads(counts, counts, 0, 140, 1.0, 2)
    send, recv = alltoall_bytes(loads, 4, 70, 1.0)
    assert recv.argmax() == 0 and recv[0] > 3 * recv[1]
    assert send.sum() == pytest.approx(recv.sum())
    assert send[0] < send[1]  # the hot rank keeps more of its own traffic at home


def test_node_limited_routing_never_increases_internode_bytes():
    for seed in range(5):
        m = MoEConfig(num_experts=64, router_topk=8, router_load="skewed", router_skew=0.7)
        loads = route(m, 2048, rng_for(seed))
        ep, rpn, bpt = 32, 4, 7168.0
        flat = alltoall_matrix(loads, ep, 2048, bpt)
        node = np.arange(ep) // rpn
        flat_inter = np.where(node[:, None] != node[None, :], flat, 0).sum(axis=1)
        unlimited = internode_bytes(loads, ep, 2048, bpt, rpn)
        assert np.all(unlimited <= flat_inter + 1e-6)
        previous = unlimited
        for limit in (8, 4, 2, 1):
            limited = internode_bytes(loads, ep, 2048, bpt, rpn, max_nodes_per_token=limit)
            assert np.all(limited <= previous + 1e-6)
            previous = limited
        assert previous.max() <= 2048 * bpt * 1.0 + 1e-6  # one remote node at most per token
    send, recv = alltoall_bytes(loads, ep, 2048, bpt, ranks_per_node=rpn, max_nodes_per_token=4)
    assert send.sum() == pytest.approx(recv.sum())


def run_cli(argv, capsys, monkeypatch):
    rc = cli_main.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_is_registered():
    assert cli_main.COMMANDS["moe-balance"][0] == "simulator.cli.moe_balance"


def test_cli_table_and_json_on_mixtral(capsys, monkeypatch):
    path = str(ROOT / "workloads" / "mixtral-8x7b.yaml")
    rc, out, _ = run_cli(["moe-balance", path, "--steps", "40"], capsys, monkeypatch)
    assert rc == 0
    assert "mixtral-8x7b" in out and "expert max/mean" in out and "final:" in out
    rc, out, _ = run_cli(["moe-balance", path, "--steps", "30", "--format", "json", "--set",
                          "model.moe.balancing=aux_free_bias"], capsys, monkeypatch)
    doc = json.loads(out)
    assert rc == 0 and len(doc["rows"]) == 30 and doc["balancing"] == "aux_free_bias"
    assert doc["final"]["max_over_mean"] < doc["initial"]["max_over_mean"]
    rc, out, _ = run_cli(["moe-balance", path, "--steps", "5", "--format", "csv"],
                         capsys, monkeypatch)
    assert rc == 0 and out.splitlines()[0].startswith("step,max_over_mean")
    assert len(out.splitlines()) == 6


def test_cli_without_moe_exits_2_with_one_line(capsys, monkeypatch):
    rc, out, err = run_cli(["moe-balance", str(ROOT / "workloads" / "tiny.yaml")],
                           capsys, monkeypatch)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "model.moe" in err


@pytest.mark.parametrize("name", ["mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"])
def test_moe_workloads_load(name):
    w = load_workload(str(ROOT / "workloads" / f"{name}.yaml"))
    assert w.model.moe is not None
    assert w.model.moe.num_experts % w.parallelism.expert == 0
    tr = w.training
    assert tr.global_batch_size % (tr.micro_batch_size * w.parallelism.data) == 0
