"""Extreme but valid inputs give a sane result (or a clear ConfigError), never a crash."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
H100 = yaml.safe_load((ROOT / "topologies" / "dgx-h100.yaml").read_text())
ONE_GPU = {"parallelism.tensor": 1, "parallelism.pipeline": 1, "parallelism.data": 1,
           "parallelism.sequence_parallel": False}


def _sane(r) -> None:
    """The fuzz test's invariants, for one result."""
    numbers = [r.step_time_s, r.tokens_per_s, r.mfu, r.bubble_fraction, r.memory_per_gpu_GB,
               *r.exposed_comm_s.values(), *r.breakdown_s.values(), *r.imbalance.values()]
    assert all(math.isfinite(x) for x in numbers), numbers
    assert r.step_time_s > 0 and r.tokens_per_s > 0 and r.memory_per_gpu_GB > 0
    assert 0.0 <= r.bubble_fraction < 1.0
    assert all(0.0 <= t <= r.step_time_s for t in r.exposed_comm_s.values())


def _cluster(gpus: int) -> dict:
    topo = copy.deepcopy(H100)
    topo["tiers"][-1]["size"] = gpus
    return topo


def test_one_gpu():
    r = simulate("tiny", "dgx-h100", **ONE_GPU)
    _sane(r)
    assert r.num_gpus == 1 and r.exposed_comm_s["tp"] == 0 and r.bubble_fraction == 0


def test_one_hundred_thousand_gpus():
    r = simulate("llama3-8b", _cluster(131_072), **{
        "parallelism.tensor": 8, "parallelism.pipeline": 1, "parallelism.data": 12_500,
        "training.global_batch_size": 12_500, "training.micro_batch_size": 1})
    _sane(r)
    assert r.num_gpus == 100_000 and r.plan["microbatches"] == 1
    assert r.exposed_comm_s["dp"] > 0  # a 12,500-way gradient reduction is not free


def test_million_token_sequence_on_one_gpu_does_not_fit_but_is_a_result():
    r = simulate("tiny", "dgx-h100", **{**ONE_GPU, "model.seq_length": 2**20,
                                        "training.global_batch_size": 1,
                                        "training.micro_batch_size": 1})
    _sane(r)
    assert r.fits_in_memory is False and r.memory_per_gpu_GB > 80


def test_million_token_sequence_with_context_parallelism():
    r = simulate("llama3-8b", "dgx-h100", **{
        "parallelism.tensor": 8, "parallelism.context": 16, "parallelism.pipeline": 1,
        "parallelism.data": 1, "model.seq_length": 2**20, "training.global_batch_size": 1,
        "training.micro_batch_size": 1})
    _sane(r)
    assert r.num_gpus == 128 and r.plan["cp"] == 16


def test_one_micro_batch():
    r = simulate("tiny", "dgx-h100", **{"training.global_batch_size": 2})
    _sane(r)
    assert r.plan["microbatches"] == 1 and r.bubble_fraction > 0  # PP2 with m=1 idles


def test_1024_experts():
    r = simulate("tiny", "dgx-h100", **{
        "model.moe.num_experts": 1024, "model.moe.router_topk": 8, "parallelism.data": 8,
        "parallelism.expert": 16, "parallelism.expert_tensor": 1,
        "training.global_batch_size": 16})
    _sane(r)
    assert r.num_gpus == 32 and r.plan["ep"] == 16


@pytest.mark.parametrize("size, overrides", [(8, {}), (1, ONE_GPU)])
def test_topology_with_a_single_tier(size, overrides):
    topo = {**H100, "tiers": [{**H100["tiers"][0], "size": size}]}
    r = simulate("tiny", topo, **overrides)
    _sane(r)
    assert r.num_gpus <= size
