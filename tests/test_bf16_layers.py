"""Decoder layers kept in 16-bit under an FP8 / NVFP4 recipe (Megatron-Core
``--first-last-layers-bf16``, ``--num-layers-at-start-in-bf16``, ``--num-layers-at-end-in-bf16``):
those layers cost what the bf16 run's layers cost, the others what the scaled run's do."""

from __future__ import annotations

import pytest

from simulator import ConfigError, simulate
from simulator.api import resolve
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.shape.params import layer_params

PLAN = {"parallelism.tensor": 1, "parallelism.pipeline": 1, "parallelism.data": 8,
        "training.precision": "fp4"}
LAYERS = 32  # llama3-8b


def _bf16(start: int, end: int) -> dict:
    return {"training.first_last_layers_bf16": True,
            "training.num_layers_at_start_in_bf16": start,
            "training.num_layers_at_end_in_bf16": end}


def test_which_layers_run_in_bf16_follows_megatron_core():
    w, _ = resolve("llama3-8b", "gb200-nvl72", {**PLAN, **_bf16(2, 5)})
    assert [i for i in range(LAYERS) if w.bf16_layer(i)] == [0, 1, 27, 28, 29, 30, 31]
    assert w.bf16_layers == 7
    w, _ = resolve("llama3-8b", "gb200-nvl72", PLAN)  # the flag off: none, whatever the counts
    assert w.bf16_layers == 0


@pytest.mark.parametrize("precision", ["fp4", "fp8"])
def test_compute_is_the_per_layer_mix_of_the_two_runs(precision):
    """On one stage the step's compute is the scaled run's plus k/L of the difference to the
    bf16 run's (every layer costs alike), and with every layer in 16-bit it is the bf16 run."""
    plan = {**PLAN, "training.precision": precision, "training.fp8_recipe": "tensorwise"}
    low = simulate("llama3-8b", "gb200-nvl72", plan).compute_time_s
    high = simulate("llama3-8b", "gb200-nvl72", {**plan, "training.precision": "bf16"})
    for start, end in ((1, 1), (0, 5), (3, 13)):
        k = start + end
        mixed = simulate("llama3-8b", "gb200-nvl72", {**plan, **_bf16(start, end)})
        assert mixed.compute_time_s == pytest.approx(
            low + k / LAYERS * (high.compute_time_s - low), rel=1e-9)
    every = simulate("llama3-8b", "gb200-nvl72", {**plan, **_bf16(0, LAYERS)})
    assert every.step_time_s == pytest.approx(high.step_time_s, rel=1e-9)


def test_bf16_layers_keep_16_bit_weights_saved_inputs_and_no_scaled_copies():
    topo = "gb200-nvl72"
    fp4 = {**PLAN, "training.fp4_param_gather": True}

    def memory(over):
        w, t = resolve("llama3-8b", topo, over)
        return w, estimate_memory(w, Topology.from_config(t)).stages[0]

    w, base = memory(fp4)
    _, mixed = memory({**fp4, **_bf16(0, 5)})
    per_layer = layer_params(w, False).dense
    # weights held whole (no Megatron-FSDP): 16-bit in the five layers, NVFP4 elsewhere
    assert mixed.parameters - base.parameters == pytest.approx(
        (2.0 - 0.5625) * 5 * per_layer, rel=1e-9)
    assert base.fp8_weight_copies - mixed.fp8_weight_copies == pytest.approx(
        0.5625 * 5 * per_layer, rel=1e-9)
    _, every = memory({**fp4, **_bf16(0, LAYERS)})
    _, bf16 = memory({**PLAN, "training.precision": "bf16"})
    assert every.activations == pytest.approx(bf16.activations, rel=1e-9)
    assert base.activations < mixed.activations < every.activations


@pytest.mark.parametrize("over, field", [
    ({"training.precision": "bf16", **_bf16(1, 1)}, "training.first_last_layers_bf16"),
    ({**_bf16(20, 13)}, "training.num_layers_at_end_in_bf16"),
    ({"training.precision": "fp8", "training.fp8_recipe": "tensorwise",
      "training.stack": "torchtitan", **_bf16(1, 1)}, "training.first_last_layers_bf16"),
    ({"training.precision": "fp8", **_bf16(1, 1)}, "training.first_last_layers_bf16"),
])
def test_bf16_layer_inputs_are_checked(over, field):
    with pytest.raises(ConfigError) as err:
        simulate("llama3-8b", "gb200-nvl72", {**PLAN, **over})
    assert err.value.field == field


def test_a_moe_model_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as err:
        simulate("mixtral-8x7b", "gb200-nvl72", {"training.precision": "fp8",
                                                 "training.fp8_recipe": "tensorwise",
                                                 **_bf16(1, 1)})
    assert err.value.field == "training.first_last_layers_bf16"


def test_bf16_layers_slow_the_stages_that_hold_them():
    """Pipelined (PP 4, interleaved): the chunks holding 16-bit layers cost more, so the step
    grows with their number, and the first layers, on stage 0's first chunk, are costed
    there (the plan's chunk kinds tell them apart)."""
    plan = {"parallelism.tensor": 2, "parallelism.pipeline": 4, "parallelism.data": 2,
            "parallelism.virtual_pipeline": 2, "parallelism.pipeline_schedule": "interleaved",
            "training.precision": "fp4", "training.global_batch_size": 64}
    steps = [simulate("llama3-70b", "gb300-nvl72",
                      {**plan, **(_bf16(k, k) if k else {})}).step_time_s for k in (0, 1, 4)]
    assert steps[0] < steps[1] < steps[2]
