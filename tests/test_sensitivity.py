"""Sensitivity: elasticities of step time and memory to every hardware constant."""

from __future__ import annotations

import json

import pytest

from simulator import sensitivity
from simulator.cli.main import main
from simulator.config import load_topology
from simulator.sensitivity import constants


@pytest.fixture(scope="module")
def rows():
    return {r.name: r for r in sensitivity("tiny", "dgx-h100")}


def test_constants_are_discovered_from_the_schema():
    names = dict(constants(load_topology("dgx-h100")))
    assert {"gpu.gemm_efficiency", "gpu.peak_tflops.bf16", "gpu.kernel_overhead_us",
            "gpu.comm_overlap_slowdown", "tiers.0.bandwidth_GBps", "tiers.1.latency_us",
            "tiers.2.alltoall_efficiency"} <= set(names)
    assert "tiers.0.size" not in names  # structural integers are not perturbed


def test_constants_that_enter_only_as_a_product_have_equal_elasticities(rows):
    # Memory-bound kernels take bytes / (hbm_bandwidth * memory_bandwidth_efficiency): the two
    # constants appear only as that product, so their elasticities are identical.
    hbm, eff = rows["gpu.hbm_bandwidth_TBps"], rows["gpu.memory_bandwidth_efficiency"]
    assert hbm.step_time < 0
    assert hbm.step_time == pytest.approx(eff.step_time, rel=1e-9)


def test_peak_moves_the_step_like_gemm_and_attention_together(rows):
    # GEMMs take flops / (peak * gemm_eff), attention flops / (peak * attn_eff): scaling the
    # bf16 peak scales both, so its elasticity is about the sum of theirs, and above -1.
    peak = rows["gpu.peak_tflops.bf16"].step_time
    both = rows["gpu.gemm_efficiency"].step_time + rows["gpu.attention_efficiency"].step_time
    assert -1.0 < peak < 0.0
    assert peak == pytest.approx(both, rel=0.05)


def test_unused_constants_have_no_effect_and_memory_has_its_own(rows):
    # tiny runs inside one node: the spine tier and the FP8 efficiency do not enter.
    assert rows["tiers.2.bandwidth_GBps"].step_time == 0.0
    assert rows["gpu.fp8_gemm_efficiency"].step_time == 0.0
    fw = rows["gpu.framework_memory_GB"]
    assert fw.step_time == 0.0 and 0.0 < fw.memory < 1.0


def test_a_bounded_constant_is_differenced_one_sidedly(rows):
    over = rows["tiers.0.oversubscription"]  # 1.0 is its lower bound
    assert over.low == 1.0 and over.high == pytest.approx(1.1)


def test_overrides_are_a_mapping_and_change_the_answer(rows):
    # Without tensor parallelism nothing crosses NVLink inside a step but the gradients.
    (tp1,) = sensitivity("tiny", "dgx-h100", {"parallelism.tensor": 1},
                         only=["tiers.0.bandwidth"])
    assert tp1.name == "tiers.0.bandwidth_GBps"
    assert rows[tp1.name].step_time < tp1.step_time <= 0.0


def test_cli_json_and_tornado_figure(tmp_path, capsys):
    fig = tmp_path / "t.png"
    assert main(["sensitivity", "tiny", "-t", "dgx-h100", "--format", "json", "--only",
                 "gpu.gemm", "--only", "gpu.attention", "--figure", str(fig)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(c["name"] for c in doc["constants"]) == [
        "gpu.attention_efficiency", "gpu.gemm_efficiency", "gpu.gemm_half_dim"]
    effects = [abs(c["step_time"]) for c in doc["constants"]]
    assert effects == sorted(effects, reverse=True) and effects[0] > 0.1
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["sensitivity", "tiny", "-t", "dgx-h100", "--step", "2"]) == 2
