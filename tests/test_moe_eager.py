"""GPT-OSS-style expert and attention features: eager clamp / FC2-bias kernels
(simulator/workload/moe/eager.py), sliding-window attention and the head-dim rate of TE
kernels (simulator/workload/ops.py, simulator/compute/attention.py)."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.compute.attention import kernel_efficiency
from simulator.config import load_topology
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.workload.moe.eager import eager_expert_ops
from simulator.workload.ops import layer_forward, window_keys, window_share

GPT_OSS = {
    "model": {
        "name": "gpt-oss-120b-like", "num_layers": 8, "hidden_size": 2880,
        "num_attention_heads": 64, "num_query_groups": 8, "kv_channels": 64,
        "ffn_hidden_size": 2880, "gated_linear_unit": True, "vocab_size": 201088,
        "seq_length": 4096, "hidden_dropout": 0.0, "attention_dropout": 0.0,
        "untie_embeddings_and_output_weights": True,
        "add_bias_linear": True, "activation_func_clamp_value": 7.0,
        "window_size": 128, "window_attn_skip_freq": 2,
        "moe": {"num_experts": 32, "router_topk": 4, "ffn_hidden_size": 2880,
                "token_dispatcher_type": "alltoall"},
    },
    "parallelism": {"tensor": 1, "pipeline": 1, "data": 8, "expert": 8},
    "training": {"global_batch_size": 16, "micro_batch_size": 1, "precision": "bf16"},
}


def _with(**sets):
    from simulator.api import resolve
    w, _ = resolve(GPT_OSS, "dgx-h100", sets)
    return w


def _step(**sets) -> float:
    return simulate(GPT_OSS, "dgx-h100", sets, variability=False).step_time_s


def test_eager_kernels_only_where_the_release_runs_them():
    on = eager_expert_ops(_with(), 2880, 2880)
    assert on.any and on.fwd_row_bytes > 0 and on.bwd_row_bytes > 0
    assert on.fwd_kernels_per_expert > 0 and on.bwd_kernels_per_expert > 0
    assert not eager_expert_ops(_with(**{"training.use_transformer_engine_op_fuser": True}),
                                2880, 2880).any
    plain = _with(**{"model.add_bias_linear": False,
                     "model.activation_func_clamp_value": None})
    assert not eager_expert_ops(plain, 2880, 2880).any
    # the clamp re-runs only inside a moe_act recompute
    assert on.redo_row_bytes == 0
    rc = _with(**{"training.recompute": "selective",
                  "training.recompute_modules": ["moe_act"]})
    assert eager_expert_ops(rc, 2880, 2880).redo_row_bytes == on.fwd_row_bytes - \
        eager_expert_ops(_with(**{"model.activation_func_clamp_value": None}),
                         2880, 2880).fwd_row_bytes


def test_eager_kernels_lengthen_the_step_and_the_op_fuser_removes_them():
    plain = _step(**{"model.add_bias_linear": False, "model.activation_func_clamp_value": None})
    clamp = _step(**{"model.add_bias_linear": False})
    both = _step()
    fused = _step(**{"training.use_transformer_engine_op_fuser": True})
    assert plain < clamp < both
    assert fused == pytest.approx(plain, rel=1e-12)


def test_window_keys_and_share():
    assert window_keys(4096, 10**6) == pytest.approx((4096 + 1) / 2)
    assert window_keys(4096, 0) == pytest.approx(1.0)
    assert 126 < window_keys(4096, 128) < 129  # 129 keys but on the first 128 rows
    assert window_share(_with()) == pytest.approx(0.5)
    assert window_share(_with(**{"model.window_attn_skip_freq": None})) == 1.0
    assert window_share(_with(**{"model.window_size": None,
                                 "model.window_attn_skip_freq": None})) == 0.0
    with pytest.raises(ConfigError, match="window_attn_skip_freq"):
        _with(**{"model.window_size": None})


def test_a_window_as_long_as_the_sequence_is_causal_attention():
    def attn_flops(**sets):
        return sum(o.flops for o in layer_forward(_with(**sets)) if o.kind == "attn")
    full = attn_flops(**{"model.window_size": None, "model.window_attn_skip_freq": None})
    assert attn_flops(**{"model.window_size": 4095}) == pytest.approx(full, rel=1e-3)
    assert attn_flops() < 0.6 * full  # half the layers at 128 keys
    slide = _step()
    causal = _step(**{"model.window_size": None, "model.window_attn_skip_freq": None})
    assert slide < causal


def test_te_attention_slower_below_head_dim_128_and_unchanged_above():
    # a fitted TE constant (A100) stands for head dims 128-192: only below 128 is it slower
    gpu = Topology.from_config(load_topology("dgx-a100")).gpu
    e = {d: kernel_efficiency("te", gpu, 4096.0, d, True) for d in (64, 128, 192)}
    assert e[64] < e[128] == e[192]
    # a kernel-benchmark figure (H100: cuDNN at head dim 128) follows the head-dim curve
    h100 = Topology.from_config(load_topology("dgx-h100")).gpu
    e = {d: kernel_efficiency("te", h100, 4096.0, d, True) for d in (64, 128, 192)}
    assert e[64] < e[128] < e[192]
