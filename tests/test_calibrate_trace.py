"""Kineto traces: kernel names map to op kinds, and the report compares them with the simulator.

The synthetic trace is built like a ``torch.profiler`` export of a Megatron-Core / Transformer
Engine step on H100: complete events of category ``kernel`` with the kernel names those
libraries launch (cuBLAS sm90_xmma / nvjet GEMMs, cuDNN and FlashAttention kernels, NCCL device
kernels, ATen elementwise / TE norm / Adam multi-tensor kernels), ``ProfilerStep#N`` CPU
annotations, runtime and memcpy events that are not kernels.
"""

from __future__ import annotations

import json

import pytest

from simulator.calibrate import calibrate, kineto, report
from simulator.calibrate.detect import read_one
from simulator.errors import ConfigError

KERNELS = [  # (name, kind, us per step)
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
     "execute_segment_k_off_kernel__5x_cublas", "gemm", 5200.0),
    ("nvjet_tst_256x128_64x4_2x1_v_bz_coopB_TNT", "gemm", 3100.0),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_32x1_nn_"
     "align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_32x1_nn_align8::Params)",
     "gemm", 400.0),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_"
     "kernel0_0", "attention", 900.0),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_7_64x128x128_4x1x1_"
     "kernel0_0", "attention", 2100.0),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t>, false, true, false, false, true, true, false>(flash::Flash_fwd_"
     "params)", "attention", 300.0),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm", 800.0),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "comm", 700.0),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm",
     300.0),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "comm", 150.0),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
     "BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::"
     "BFloat16>, at::detail::Array<char*, 3>)", "memory", 600.0),
    ("void transformer_engine::normalization::rmsnorm_fwd_tuned_kernel<transformer_engine::"
     "normalization::Kernel_traits<__nv_bfloat16, __nv_bfloat16, float, float, unsigned int, "
     "4096u, 1u, 1u, 4u, 16u, 32u> >(transformer_engine::normalization::FwdParams)", "memory",
     250.0),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, (ADAM_MODE)1, "
     "float>, float, float, float, float, float, float, adamMode_t, float>(long, int volatile*, "
     "TensorListMetadata<4>, AdamFunctor<float, (ADAM_MODE)1, float>)", "memory", 350.0),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
     "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1}>",
     "memory", 200.0),
    ("void transformer_engine::scaled_aligned_causal_masked_softmax_warp_forward<__nv_bfloat16,"
     " __nv_bfloat16, float, 11>", "memory", 90.0),
    ("triton_poi_fused_add_mul_silu_0", "memory", 150.0),
    ("void apply_rotary_pos_emb_kernel<__nv_bfloat16>", "memory", 120.0),
    ("my_lab_custom_fused_thing_v2", None, 100.0),
]


def trace(steps: int = 2) -> dict:
    events, ts = [], 0.0
    for s in range(steps):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}",
                       "pid": 1, "tid": 1, "ts": ts, "dur": 20000.0})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": 1, "tid": 1, "ts": ts, "dur": 5.0})
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)",
                       "pid": 0, "tid": 7, "ts": ts, "dur": 50.0})
        for name, _, us in KERNELS:
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                           "ts": ts, "dur": us, "args": {"device": 0, "stream": 7}})
            ts += us
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "traceEvents": events}


def test_every_known_kernel_maps_to_its_kind():
    for name, kind, _ in KERNELS:
        assert kineto.kind_of(name) == kind, name


def test_at_least_95_percent_of_kernel_time_is_mapped(tmp_path):
    path = tmp_path / "step.json"
    path.write_text(json.dumps(trace()))
    prof = read_one(path, {}).traces[0]
    assert prof.steps == 2
    assert prof.mapped_fraction >= 0.95
    total_us = sum(us for _, _, us in KERNELS)
    assert prof.total_s == pytest.approx(total_us * 1e-6)
    assert prof.kind_s["gemm"] == pytest.approx(8700e-6)
    assert list(prof.unmapped_s) == ["my_lab_custom_fused_thing_v2"]


def test_report_shows_traced_and_simulated_time_per_op_kind(tmp_path):
    path = tmp_path / "step.json"
    path.write_text(json.dumps(trace()))
    (tmp_path / "step.json.run.yaml").write_text("workload: tiny\n")
    cal = calibrate("dgx-h100", [path], date="2026-12-02")
    assert not cal.stages  # a trace is compared, not fitted
    rows = {r["kind"]: r for r in cal.traces[0]["rows"]}
    assert rows["gemm"]["traced_s"] == pytest.approx(8700e-6)
    assert rows["gemm"]["simulated_s"] > 0 and rows["comm"]["simulated_s"] > 0
    text = report.markdown(cal)
    assert "| gemm | 0.0087 |" in text and "op kind" in text


def test_a_trace_without_kernels_is_refused(tmp_path):
    doc = trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] != "kernel"]
    path = tmp_path / "cpu_only.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"cpu_only.json:1: traceEvents .*no GPU kernels"):
        read_one(path, {})
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [\n{"ph": "X",,}]}')
    with pytest.raises(ConfigError, match=r"bad.json:2: trace .*not JSON"):
        read_one(bad, {})
