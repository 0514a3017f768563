"""GB300 NVL72: what differs from GB200 NVL72, and that its one fitted constant is the fit.

The hardware differences are sourced in topologies/gb300-nvl72.yaml (usable HBM from NVIDIA's
MLPerf system description, an 800 Gb/s NIC per GPU, 1.4 kW, the cuDNN attention kernel's
own GB300 rate); the FP8 GEMM efficiency is fitted on the training cases of
validation/dense_step_time_gb300.yaml (Megatron-Bridge tables), the BF16 GEMM constants are
GB200's.
"""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.config import load_topology
from simulator.validation import load_cases
from simulator.validation.cases import precision
from simulator.validation.fit import fit, training_cases

CARRIED = ("gemm_efficiency", "gemm_half_dim",
           "memory_bandwidth_efficiency", "comm_overlap_slowdown", "host_launch_us")


def test_gb300_differs_from_gb200_where_the_hardware_does():
    gb200, gb300 = load_topology("gb200-nvl72"), load_topology("gb300-nvl72")
    for name in CARRIED:  # nothing to fit them on: no BF16 GB300 run is published
        assert getattr(gb300.gpu, name) == getattr(gb200.gpu, name), name
    peaks = {k: v for k, v in gb300.gpu.peak_tflops.model_dump().items() if k != "fp4"}
    assert peaks == {k: v for k, v in gb200.gpu.peak_tflops.model_dump().items()
                     if k != "fp4"}  # same BF16 / FP8 peaks
    # Blackwell Ultra raises only NVFP4: 15 against 10 dense PFLOPS (Hot Chips 2025)
    assert gb300.gpu.peak_tflops.fp4 == 1.5 * gb200.gpu.peak_tflops.fp4
    assert gb300.gpu.hbm_usable_MiB / gb200.gpu.hbm_usable_MiB == pytest.approx(1.5, abs=1e-3)
    nv2, nv3 = gb200.tiers[0], gb300.tiers[0]
    assert (nv3.size, nv3.bandwidth_GBps) == (nv2.size, nv2.bandwidth_GBps) == (72, 900)
    assert gb300.tiers[1].bandwidth_GBps == 2 * gb200.tiers[1].bandwidth_GBps  # 800 vs 400 Gb/s
    assert gb300.power.gpu_tdp_W == 1400 > gb200.power.gpu_tdp_W
    assert gb300.gpu.fp8_gemm_efficiency > gb200.gpu.fp8_gemm_efficiency
    # Blackwell Ultra's doubled SFU exponential rate: cuDNN SDPA 1.2-1.3x B200's in the same
    # benchmark (tests/test_attention_blackwell.py)
    assert gb300.gpu.attention_efficiency > 1.15 * gb200.gpu.attention_efficiency


def test_shipped_fp8_efficiency_is_the_fit_on_the_training_cases():
    cases = [c for c in training_cases("gb300-nvl72") if precision(c) == "fp8"]
    assert len(cases) == 11
    assert not any(c.holdout for c in cases)
    best = fit(cases, {"gpu.fp8_gemm_efficiency": 0.6}, ["gpu.fp8_gemm_efficiency"],
               sweeps=1, iters=14, log=lambda line: None)
    shipped = load_topology("gb300-nvl72").gpu.fp8_gemm_efficiency
    assert best["gpu.fp8_gemm_efficiency"] == pytest.approx(shipped, abs=0.002)


@pytest.mark.parametrize("topology, n", [("gb300-nvl72", 5)])
def test_shipped_fp4_efficiency_is_the_fit_on_the_nvfp4_training_cases(topology, n):
    """NVFP4's efficiency is fitted on the Megatron-Bridge NVFP4 rows alone, the other constants
    held (the command in the topology's sources); the MLPerf NVFP4 runs are never fitted, and
    GB200's NVFP4 rows neither (gb200-nvl72 carries its FP8 value)."""
    cases = [c for c in training_cases(topology) if precision(c) == "fp4"]
    assert len(cases) == n and not any(c.holdout for c in cases)
    best = fit(cases, {"gpu.fp4_gemm_efficiency": 0.6}, ["gpu.fp4_gemm_efficiency"],
               sweeps=1, iters=14, log=lambda line: None)
    shipped = load_topology(topology).gpu.fp4_gemm_efficiency
    assert best["gpu.fp4_gemm_efficiency"] == pytest.approx(shipped, abs=0.002)


def test_held_out_cases_follow_the_fixed_rule():
    gb300 = [c for c in load_cases(categories=["dense_step_time"])
             if c.topology == "gb300-nvl72"]
    assert len(gb300) == 24
    assert [i for i, c in enumerate(gb300, 1) if c.holdout] == list(range(3, 25, 3))


def test_the_70b_fsdp_recipe_fits_on_gb300_and_not_on_gb200_without_offloading():
    # Megatron-Bridge's GB300 70B FP8 recipe: ZeRO-3 over 64 GPUs, MBS 2, 20 of 80 layers'
    # activations offloaded to Grace; GB200's recipe offloads 40 for its 186 GB
    over = {"parallelism.tensor": 1, "parallelism.pipeline": 1, "parallelism.data": 64,
            "parallelism.virtual_pipeline": None, "parallelism.pipeline_schedule": "1f1b",
            "parallelism.sequence_parallel": False, "training.global_batch_size": 256,
            "training.micro_batch_size": 2, "training.precision": "fp8",
            "training.fp8_recipe": "tensorwise", "training.fp8_param_gather": True,
            "training.use_megatron_fsdp": True, "training.cpu_offloading": True,
            "training.cpu_offloading_num_layers": 20, "training.tp_comm_overlap": False,
            "training.cross_entropy_loss_fusion": True,
            "training.cross_entropy_fusion_impl": "te"}
    gb300 = simulate("llama3-70b", "gb300-nvl72", overrides=over)
    gb200 = simulate("llama3-70b", "gb200-nvl72", overrides=over)
    assert gb300.fits_in_memory and gb300.memory_per_gpu_GB > 186
    assert not gb200.fits_in_memory
    assert gb300.step_time_s < gb200.step_time_s
