"""training.optimizer (Megatron-Core --optimizer adam / lion / sgd): the states each keeps
beside the main copy, in memory, in the optimizer step and in the checkpoint."""

from __future__ import annotations

import pytest

from simulator import ConfigError, simulate
from simulator.compute import optimizer_time
from simulator.config import load_topology, load_workload
from simulator.hardware import Topology
from simulator.memory import estimate_memory, stage_params
from simulator.memory.states import optimizer_bytes, optimizer_states
from simulator.reliability.checkpoint import bytes_per_param
from simulator.shape.partition import partition_layers

TP1 = {"parallelism.tensor": 1, "parallelism.data": 8, "parallelism.sequence_parallel": False}


@pytest.fixture(scope="module")
def h100() -> Topology:
    return Topology.from_config(load_topology("dgx-h100"))


@pytest.mark.parametrize("over, states, per_param", [
    ({}, 2, 12),  # Adam: fp32 main + exp_avg + exp_avg_sq
    ({"training.optimizer": "lion"}, 1, 8),  # Lion: the momentum only
    ({"training.optimizer": "sgd"}, 1, 8),  # SGD: the momentum buffer (0.9 by default)
    ({"training.optimizer": "sgd", "training.sgd_momentum": 0.0}, 0, 4),  # plain SGD
])
def test_optimizer_states_in_memory_sharded_over_the_data_ranks(h100, over, states, per_param):
    w = load_workload("llama3-8b", {**TP1, **over})
    assert len(optimizer_states(w.training)) == states
    assert optimizer_bytes(w.training) == per_param
    st = estimate_memory(w, h100).stages[0]
    n = stage_params(w, partition_layers(w), 0).total
    assert st.optimizer == pytest.approx(per_param * n / 8)


def test_lion_moment_takes_the_precision_aware_dtype():
    w = load_workload("llama3-8b", {"training.optimizer": "lion",
                                    "training.use_precision_aware_optimizer": True,
                                    "training.exp_avg_dtype": "bf16",
                                    "training.exp_avg_sq_dtype": "bf16"})
    assert optimizer_states(w.training) == ("bf16",)
    assert optimizer_bytes(w.training) == 4 + 2  # no second moment to hold


def test_optimizer_step_reads_and_writes_each_state_once(h100):
    # 2 (4 + 4 s) + 4 + 2 bytes a parameter: Adam's 30, one state 22, none 14
    times = [optimizer_time(1e9, h100.gpu, s) - h100.gpu.kernel_overhead_s for s in (2, 1, 0)]
    assert times[1] / times[0] == pytest.approx(22 / 30)
    assert times[2] / times[0] == pytest.approx(14 / 30)
    assert optimizer_time(1e9, h100.gpu) == optimizer_time(1e9, h100.gpu, 2)


def test_checkpoint_holds_the_optimizers_states():
    assert bytes_per_param(load_workload("llama3-8b")) == 14  # the Adam figure of ZeRO
    assert bytes_per_param(load_workload("llama3-8b", {"training.optimizer": "lion"})) == 10
    assert bytes_per_param(load_workload("llama3-8b", {"training.optimizer": "sgd",
                                                       "training.sgd_momentum": 0})) == 6


def test_a_one_state_optimizer_steps_faster_and_holds_less():
    over = {**TP1, "training.distributed_optimizer": False}  # the step over all parameters
    adam = simulate("llama3-8b", "dgx-h100", over)
    lion = simulate("llama3-8b", "dgx-h100", {**over, "training.optimizer": "lion"})
    assert lion.optimizer_time_s < adam.optimizer_time_s
    assert lion.step_time_s <= adam.step_time_s
    assert lion.memory_per_gpu_GB < adam.memory_per_gpu_GB
    # the one state fewer, fp32, on every GPU (the optimizer is replicated here)
    n = 8.03e9
    assert adam.memory_per_gpu_GB - lion.memory_per_gpu_GB == pytest.approx(4 * n / 1e9, rel=0.01)


@pytest.mark.parametrize("field, value, allowed", [
    ("training.optimizer", "muon", "'adam', 'sgd' or 'lion'"),
    ("training.sgd_momentum", 1.0, "less than 1"),
])
def test_optimizer_inputs_are_checked(field, value, allowed):
    with pytest.raises(ConfigError, match=allowed):
        load_workload("llama3-8b", {field: value})
