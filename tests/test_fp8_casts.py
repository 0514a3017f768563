"""Transformer Engine FP8 quantisation traffic (simulator/workload/fp8.py): exact bytes per
linear, their placement in the forward / backward op lists, and their share of a GEMM."""

from __future__ import annotations

import pytest

from simulator.api import plan, resolve
from simulator.hardware import Topology
from simulator.workload import fp8
from simulator.workload.cost import CostContext, op_time
from simulator.workload.ops import REGATHER, backward_of, dims, layer_forward


def _w(**training):
    over = {f"training.{k}": v for k, v in training.items()}
    w, t = resolve("llama3-8b", "dgx-h100", over)
    return w, Topology.from_config(t)


def _by_name(ops):
    return {o.name: o for o in ops}


def test_bf16_layers_have_no_casts():
    w, _ = _w()
    assert not [o for o in layer_forward(w) if o.name.endswith(fp8.SUFFIX)]


@pytest.mark.parametrize("param_gather", [False, True])
def test_cast_bytes_per_linear(param_gather):
    w, _ = _w(precision="fp8", fp8_param_gather=param_gather)
    ops = _by_name(layer_forward(w))
    mb = w.num_microbatches
    per_w = 2.0 if param_gather else 4.0
    for name in fp8.LINEARS & ops.keys():
        t, n, k = ops[name].shape
        per_in = 2.0 if name in fp8.NORM_FUSED else 4.0  # transpose only / cast-transpose
        cast = ops[name + fp8.SUFFIX]
        assert cast.kind == "mem"
        assert cast.nbytes == pytest.approx(per_in * t * k + per_w * n * k / mb, rel=1e-12)
        assert cast.bwd_nbytes == pytest.approx(4.0 * t * n, rel=1e-12)
    assert {"qkv", "attn_proj", "fc1", "fc2"} <= ops.keys()


def test_gradient_cast_precedes_its_backward_gemm_and_keeps_tp_pairing():
    w, _ = _w(precision="fp8")
    fwd = layer_forward(w)
    bwd = backward_of(fwd)
    names = [o.name for o in bwd]
    for lin in ("qkv", "attn_proj", "fc1", "fc2"):
        i = names.index(lin + "_bwd")
        # a column-parallel GEMM's input re-gather sits between (it pairs with the GEMM)
        c = i - 2 if names[i - 1].endswith(REGATHER) else i - 1
        assert names[c] == lin + fp8.SUFFIX + "_bwd"
        assert bwd[c].nbytes == _by_name(fwd)[lin + fp8.SUFFIX].bwd_nbytes
    # the same backward as bf16 once the casts are taken out (TP collectives in place)
    w16, _ = _w()
    plain = backward_of(layer_forward(w16))
    assert [n for n in names if fp8.SUFFIX not in n] == [o.name for o in plain]
    # TE gathers FP8 (1 byte) and reduce-scatters bf16 (2 bytes)
    size16 = {o.name: o.nbytes for o in plain if o.kind == "comm"}
    for o in bwd:
        if o.kind == "comm":
            ratio = fp8.GATHER_BYTES_RATIO if o.comm == "all_gather" else 1.0
            assert o.nbytes == pytest.approx(ratio * size16[o.name]), o.name


def test_casts_cost_a_larger_share_of_narrow_local_gemms():
    # per token: cast bytes ~ k, GEMM FLOPs ~ n*k, so the share falls with the local width n
    w, topo = _w(precision="fp8")
    x = dims(w)
    ctx = CostContext(topo, {}, "fp8", False)
    ops = _by_name(layer_forward(w))
    share = {n: op_time(ops[n + fp8.SUFFIX], ctx) / op_time(ops[n], ctx) for n in ("fc1", "fc2")}
    assert x.ffn_t > x.h and share["fc2"] > share["fc1"] > 0


def test_param_gather_moves_the_weights_in_the_dtype_they_are_held():
    """Distributed optimizer: FP8 weights (fp8_param_gather) are all-gathered at 1 byte per
    parameter, 16-bit weights at 2; the collective gets cheaper, never dearer."""
    over = {"training.precision": "fp8", "parallelism.data": 8}
    held16 = plan("llama3-8b", "dgx-h100", over).engine_input
    held8 = plan("llama3-8b", "dgx-h100", {**over, "training.fp8_param_gather": True}).engine_input
    assert held16.param_gather_bytes.sum() > 0
    assert held8.param_gather_bytes == pytest.approx(held16.param_gather_bytes / 2, rel=1e-12)
    assert (held8.param_gather < held16.param_gather).all()
