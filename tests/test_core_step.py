"""End-to-end properties of the core simulator (issue 2)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import simulate
from simulator.api import plan
from simulator.cli.main import main
from simulator.compute import optimizer_time
from simulator.workload.cost import op_time
from simulator.workload.ops import backward_of, embedding_forward, layer_forward, output_forward

SINGLE = {"parallelism.tensor": 1, "parallelism.pipeline": 1, "parallelism.data": 1,
          "parallelism.sequence_parallel": False, "training.global_batch_size": 4,
          "training.micro_batch_size": 2}
REQUIRED = {"step_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu", "num_gpus",
            "bubble_fraction", "compute_time_s", "exposed_comm_s", "memory_per_gpu_GB",
            "fits_in_memory"}


def test_no_parallelism_equals_sum_of_op_times():
    p = plan("tiny", "dgx-h100", **SINGLE)
    ctx = type("Ctx", (), {})  # op_time only needs topo/dtype for compute ops
    ctx.topo, ctx.dtype = p.topo, "bf16"
    w = p.workload
    layer = layer_forward(w)
    ops = (embedding_forward(w) + layer * w.model.num_layers + output_forward(w)
           + backward_of(output_forward(w)) + backward_of(layer) * w.model.num_layers
           + backward_of(embedding_forward(w)))
    per_mb = sum(op_time(o, ctx) for o in ops)
    m = w.num_microbatches
    r = simulate("tiny", "dgx-h100", variability=False, **SINGLE)
    expected = per_mb * m + optimizer_time(p.stage_params[0].total, p.topo.gpu)
    assert r.step_time_s == pytest.approx(expected, rel=1e-12)
    assert r.bubble_fraction == 0.0
    assert sum(r.exposed_comm_s.values()) == 0.0


def test_breakdown_sums_to_step_time():
    for name in ("tiny", "llama3-70b", "gpt3-175b"):
        r = simulate(name, "dgx-h100")
        assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(bw=st.floats(1.0, 8.0), flops=st.floats(1.0, 4.0),
       tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]))
def test_more_bandwidth_or_flops_never_slower(bw, flops, tp, pp):
    over = {"parallelism.tensor": tp, "parallelism.pipeline": pp, "parallelism.data": 2,
            "model.num_layers": 8, "training.global_batch_size": 16,
            "parallelism.sequence_parallel": tp > 1}
    base = simulate("tiny", "dgx-h100", **over)
    faster_net = simulate("tiny", "dgx-h100", topology_overrides={
        "tiers.0.bandwidth_GBps": 450 * bw, "tiers.1.bandwidth_GBps": 50 * bw,
        "tiers.2.bandwidth_GBps": 50 * bw}, **over)
    faster_gpu = simulate("tiny", "dgx-h100", topology_overrides={
        "gpu.peak_tflops.bf16": 989 * flops}, **over)
    assert faster_net.step_time_s <= base.step_time_s * (1 + 1e-12)
    assert faster_gpu.step_time_s <= base.step_time_s * (1 + 1e-12)


def test_cli_json_has_required_keys(capsys):
    assert main(["run", "tiny", "--topology", "dgx-h100", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= REQUIRED
    assert set(out["exposed_comm_s"]) == {"tp", "cp", "ep", "pp", "dp"}


def test_cli_matches_api(capsys):
    main(["run", "llama3-70b", "-t", "dgx-h100", "--set", "parallelism.pipeline=8",
          "--set", "parallelism.virtual_pipeline=5", "--set", "parallelism.data=1",
          "--format", "json"])
    cli = json.loads(capsys.readouterr().out)
    api = simulate("llama3-70b", "dgx-h100", parallelism__pipeline=8,
                   parallelism__virtual_pipeline=5, parallelism__data=1)
    assert cli == json.loads(api.to_json())


def test_uneven_split_is_reported():
    r = simulate("llama3-405b", "dgx-h100")
    assert r.plan["layers_per_stage"] == [7] + [8] * 14 + [7]
    assert any("126 layers" in n for n in r.notes)


@pytest.mark.parametrize("argv,field", [
    (["--set", "parallelism.tensor=3"], "parallelism.tensor"),
    (["--set", "parallelism.data=3"], "training.global_batch_size"),
    (["--set", "parallelism.data=32768", "--set", "training.global_batch_size=32768"],
     "parallelism"),
    (["--set", "parallelism.decoder_first_pipeline_num_layers=40",
      "--set", "parallelism.pipeline=2"], "parallelism.decoder_first_pipeline_num_layers"),
    (["--set", "model.hidden_size=-4"], "model.hidden_size"),
    (["--set", "parallelism.tensor=16"], "parallelism.tensor"),
])
def test_bad_plans_are_one_line_exit_2(argv, field, capsys):
    assert main(["run", "llama3-8b", "-t", "dgx-h100", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and field in err and "Traceback" not in err


def test_async_tp_allreduce_hides_input_grad_collective_behind_wgrad():
    over = {"parallelism.sequence_parallel": False, "training.tp_comm_overlap": False}
    on = simulate("llama3-70b", "dgx-h100", **over)
    off = simulate("llama3-70b", "dgx-h100",
                   **{**over, "training.async_tensor_model_parallel_allreduce": False})
    assert off.exposed_comm_s["tp"] > on.exposed_comm_s["tp"] > 0
    assert off.step_time_s > on.step_time_s


def test_bf16_gradient_reduction_halves_grad_memory_and_dp_bytes():
    from simulator.api import resolve, simulate_resolved

    fp32 = simulate_resolved(*resolve("llama3-8b", "dgx-h100"), keep_records=True)
    bf16 = simulate_resolved(*resolve("llama3-8b", "dgx-h100",
                                      {"training.grad_reduce_in_fp32": False}),
                             keep_records=True)
    g32, g16 = (r[0].memory_breakdown_GB["gradients"] for r in (fp32, bf16))
    assert g16 == pytest.approx(g32 / 2)
    dp = [sum(x.nbytes for x in r[2].records if x.name == "grad_sync") for r in (fp32, bf16)]
    assert dp[1] == pytest.approx(dp[0] / 2)


@pytest.mark.parametrize("sp", [False, True])
def test_parallel_residual_reduces_the_layer_output_once(sp):
    """model.use_parallel_residual (GPT-NeoX gpt_j_residual): the attention and MLP outputs
    are summed and reduced once in the forward; the backward still reduces each block's
    input gradient (two norms), so only the forward (and its recompute) gets cheaper."""
    from simulator.api import resolve

    def tp_bytes(parallel):
        w = resolve("llama3-8b", "dgx-h100", {
            "parallelism.tensor": 4, "parallelism.data": 2,
            "parallelism.sequence_parallel": sp, "model.use_parallel_residual": parallel})[0]
        fwd = layer_forward(w)
        bwd = backward_of(fwd)
        return ([o.nbytes for o in fwd if o.kind == "comm"],
                [o.nbytes for o in bwd if o.kind == "comm"], fwd)

    (f0, b0, ops0), (f1, b1, ops1) = tp_bytes(False), tp_bytes(True)
    msg = max(f0)
    assert sum(f1) == pytest.approx(sum(f0) - msg)  # one output reduction fewer
    # without SP both input-gradient all-reduces stay; under SP the output gradient's one
    # all-gather serves both blocks
    assert sum(b1) == pytest.approx(sum(b0) - (msg if sp else 0.0))
    # the same FLOPs and HBM bytes
    assert sum(o.flops for o in ops1) == sum(o.flops for o in ops0)
    assert sum(o.nbytes for o in ops1 if o.kind == "mem") == \
        sum(o.nbytes for o in ops0 if o.kind == "mem")
    base = {"parallelism.tensor": 4, "parallelism.data": 2, "parallelism.sequence_parallel": sp,
            "training.async_tensor_model_parallel_allreduce": False}
    r0 = simulate("llama3-8b", "dgx-h100", base, variability=False)
    r1 = simulate("llama3-8b", "dgx-h100", dict(base, **{"model.use_parallel_residual": True}),
                  variability=False)
    assert r1.exposed_comm_s["tp"] < r0.exposed_comm_s["tp"]
    assert r1.step_time_s < r0.step_time_s
    assert r1.model_tflops_per_gpu * r1.step_time_s == pytest.approx(
        r0.model_tflops_per_gpu * r0.step_time_s)


def test_parallel_residual_is_costed_for_dense_models_only():
    from simulator import ConfigError
    with pytest.raises(ConfigError, match="use_parallel_residual"):
        simulate("mixtral-8x7b", "dgx-h100", {"model.use_parallel_residual": True})
