"""NVFP4 training (``training.precision: fp4``, Megatron-Core ``--fp4-format e2m1 --fp4-recipe
nvfp4``): the precision entry, its casts and weight copies, the GPUs that have it and the
inputs it refuses (simulator/precision.py)."""

from __future__ import annotations

import pytest

from simulator import ConfigError, simulate
from simulator.api import resolve
from simulator.cli.main import main as cli
from simulator.compute import gemm_time
from simulator.config import load_topology
from simulator.hardware import Topology
from simulator.memory.states import fp8_copy_bytes, weight_bytes
from simulator.precision import FP4_RECIPES, NVFP4_BYTES, NVFP4_CASTS, RECIPES, precision_of
from simulator.workload.ops import layer_forward, output_forward

PLAN = {"parallelism.tensor": 4, "parallelism.pipeline": 2, "parallelism.data": 8,
        "training.precision": "fp4"}


def _training(**over):
    w, _ = resolve("llama3-70b", "gb300-nvl72", {**PLAN, **over})
    return w.training


def test_nvfp4_bytes_follow_from_the_format():
    """4-bit values and one E4M3 scale a 16-value block: 0.5625 B a copy; a cast reads the
    16-bit tensor twice (amax, then quantise) and writes the row- and column-wise copies."""
    assert NVFP4_BYTES == 0.5 + 1 / 16
    prec = precision_of("fp4")
    assert prec.element_bytes == NVFP4_BYTES and prec.scaled and prec.kernel == "fp4"
    assert NVFP4_CASTS.input == NVFP4_CASTS.grad == NVFP4_CASTS.weight == 2 + 2 + 2 * NVFP4_BYTES
    assert NVFP4_CASTS.input_transpose == NVFP4_CASTS.input  # the NVFP4 norm path is unfused
    assert NVFP4_CASTS.weight_transpose == 2 * NVFP4_BYTES
    assert FP4_RECIPES == ("nvfp4",) and "nvfp4" not in RECIPES


def test_nvfp4_weights_keep_both_block_scaled_copies():
    """Block scales run along each GEMM's K: a 16-bit weight caches its row- and column-wise
    NVFP4 copies; an NVFP4 weight (fp4_param_gather) is the row-wise one and caches the other."""
    tr = _training()
    assert weight_bytes(tr) == 2.0
    assert fp8_copy_bytes(tr, any_layout=True) == 2 * NVFP4_BYTES
    tr = _training(**{"training.fp4_param_gather": True})
    assert weight_bytes(tr) == NVFP4_BYTES
    assert fp8_copy_bytes(tr, any_layout=True) == NVFP4_BYTES


def test_an_nvfp4_gemm_runs_at_the_fp4_peak_and_efficiency():
    gpu = Topology.from_config(load_topology("gb300-nvl72")).gpu
    m = n = k = 16384.0
    shape = (m / (m + gpu.gemm_half_dim)) ** 3
    expected = 2 * m * n * k / (gpu.peak("fp4") * gpu.fp4_gemm_efficiency * shape)
    assert gemm_time(m, n, k, gpu, "fp4") == pytest.approx(expected + gpu.kernel_overhead_s)
    assert gemm_time(m, n, k, gpu, "fp4") < gemm_time(m, n, k, gpu, "fp8") / 2


def test_an_unset_fp4_efficiency_falls_back_to_the_fp8_one():
    cfg = load_topology("gb300-nvl72", {"gpu.fp4_gemm_efficiency": None})
    gpu = Topology.from_config(cfg).gpu
    assert gpu.fp4_gemm_efficiency == gpu.fp8_gemm_efficiency


@pytest.mark.parametrize("topology", ["dgx-b200", "gb200-nvl72", "gb300-nvl72"])
def test_nvfp4_is_faster_than_fp8_on_blackwell_and_keeps_the_logits_in_bf16(topology):
    fp4 = simulate("llama3-70b", topology, PLAN)
    fp8 = simulate("llama3-70b", topology, {**PLAN, "training.precision": "fp8"})
    assert fp4.step_time_s < fp8.step_time_s
    w, _ = resolve("llama3-70b", topology, PLAN)
    assert {op.name: op.dtype for op in output_forward(w)}["logits"] == "bf16"  # outside TE
    layer = {op.name: op for op in layer_forward(w)}
    assert layer["fc1"].dtype is None  # the run's precision, fp4
    assert layer["fc1_fp8_cast"].nbytes > 0  # each TE linear quantises its input


@pytest.mark.parametrize("topology, allowed", [("dgx-h100", "bf16 or fp16 or fp8"),
                                               ("dgx-a100", "bf16 or fp16")])
def test_a_gpu_without_fp4_tensor_cores_is_refused_naming_what_it_has(topology, allowed):
    with pytest.raises(ConfigError) as err:
        simulate("llama3-8b", topology, {"training.precision": "fp4"})
    assert err.value.field == "training.precision" and allowed in str(err.value)


@pytest.mark.parametrize("over, field", [
    ({"training.precision": "fp8", "training.fp4_param_gather": True}, "training.fp4_param_gather"),
    ({"training.precision": "fp4", "training.fp8_param_gather": True}, "training.fp8_param_gather"),
    ({"training.precision": "bf16", "training.fp8_dot_product_attention": True},
     "training.fp8_dot_product_attention"),
    ({"training.precision": "fp4", "training.stack": "torchtitan"}, "training.precision"),
    ({"training.precision": "fp4", "training.fp4_recipe": "mxfp4"}, "training.fp4_recipe"),
])
def test_inconsistent_fp4_inputs_name_the_field(over, field):
    with pytest.raises(ConfigError) as err:
        simulate("llama3-8b", "gb200-nvl72", over)
    assert err.value.field.endswith(field.split(".", 1)[1])


def test_the_cli_refuses_fp4_on_hopper_with_exit_2(capsys):
    assert cli(["run", "llama3-8b", "-t", "dgx-h100", "--set", "training.precision=fp4"]) == 2
    err = capsys.readouterr().err
    assert "training.precision" in err and "fp4" in err and "Traceback" not in err
