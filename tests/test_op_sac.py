"""torchtitan's per-op selective activation checkpointing (``recompute_modules: [op_sac]``).

Closed forms from the policy (simulator/shape/op_sac.py): a Llama block keeps wq, wv, w1, w2
and reruns wk, wo, w3 (every second ``aten.mm``), keeps the attention output and reruns every
bandwidth-bound op.
"""

from __future__ import annotations

import pytest

from simulator.api import resolve, simulate_resolved
from simulator.config.workload import Workload
from simulator.errors import ConfigError
from simulator.memory.activations import activation_bytes_per_layer
from simulator.shape.op_sac import block_mms
from simulator.workload.ops import layer_forward, recompute_ops

MODEL = {"name": "llama3-8b", "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "num_query_groups": 8, "ffn_hidden_size": 14336, "gated_linear_unit": True,
         "vocab_size": 128256, "seq_length": 8192, "hidden_dropout": 0.0,
         "attention_dropout": 0.0, "untie_embeddings_and_output_weights": True}
BASE = {"model": MODEL, "parallelism": {"tensor": 1, "pipeline": 1, "data": 8},
        "training": {"stack": "torchtitan", "global_batch_size": 8, "micro_batch_size": 1,
                     "precision": "bf16", "use_megatron_fsdp": True,
                     "data_parallel_sharding_strategy": "optim_grads_params",
                     "recompute": "selective", "recompute_modules": ["op_sac"]}}
OTHER = {"training.recompute_modules": None}


def _w(over: dict | None = None) -> tuple[Workload, dict]:
    return resolve(BASE, "dgx-h100", over or {}, {})


def test_every_second_mm_of_a_llama_block_reruns():
    mms = block_mms(4096, 4096, 1024, 4096, 14336, glu=True)
    assert [m.name for m in mms] == ["wq", "wk", "wv", "wo", "w1", "w3", "w2"]
    assert [m.name for m in mms if not m.saved] == ["wk", "wo", "w3"]
    # without a gated MLP the sixth mm is w2, rerun
    plain = block_mms(4096, 4096, 4096, 4096, 16384, glu=False)
    assert [m.name for m in plain if not m.saved] == ["wk", "wo", "w2"]


def test_recompute_flops_are_wk_wo_w3():
    w, _ = _w()
    fwd = layer_forward(w)
    redo = recompute_ops(w, fwd)
    T, h, kv, ffn = 8192, 4096, 8 * 128, 14336
    want = 2 * T * (kv * h + h * h + ffn * h)
    assert sum(o.flops for o in redo if o.kind == "gemm") == pytest.approx(want)
    assert not [o for o in redo if o.kind == "attn"]  # the SDPA output is kept
    # every bandwidth-bound op reruns, byte for byte
    assert sum(o.nbytes for o in redo if o.kind == "mem") == \
        pytest.approx(sum(o.nbytes for o in fwd if o.kind == "mem"))
    assert all(o.model_flops == 0 for o in redo)


def test_kept_bytes_per_token_closed_form():
    w, _ = _w()
    h, q, kv, ffn, heads = 4096, 4096, 1024, 14336, 32
    # input + wq + wv + w1 + w2 outputs + attention output, 2 B; log-sum-exp 4 B a head
    per_token = 2 * (h + q + kv + ffn + h + q) + 4 * heads
    assert activation_bytes_per_layer(w) == pytest.approx(8192 * per_token)


def test_between_full_and_none_in_time_and_memory():
    results = {}
    for name, over in (("op_sac", {}), ("full", {"training.recompute": "full", **OTHER}),
                       ("none", {"training.recompute": "none", **OTHER})):
        w, t = _w(over)
        r = simulate_resolved(w, t)[0]
        results[name] = (r.step_time_s, r.memory_per_gpu_GB)
    assert results["none"][0] < results["op_sac"][0] < results["full"][0]
    assert results["full"][1] < results["op_sac"][1] < results["none"][1]


def test_op_sac_is_listed_alone_and_only_for_dense_standard_attention():
    with pytest.raises(ConfigError, match="list it alone"):
        _w({"training.recompute_modules": ["op_sac", "core_attn"]})
    moe = {"model.moe": {"num_experts": 8, "router_topk": 2, "ffn_hidden_size": 1024},
           "parallelism.expert": 8}
    with pytest.raises(ConfigError, match="dense layers with standard attention"):
        _w(moe)


def test_tp_all_gathers_rerun_reduce_scatters_are_kept():
    w, _ = _w({"parallelism.tensor": 2, "parallelism.data": 4,
               "parallelism.sequence_parallel": True})
    redo = recompute_ops(w, layer_forward(w))
    comms = {o.comm for o in redo if o.kind == "comm"}
    assert comms == {"all_gather"}
    # kept per token: the two reduce-scatter outputs (h/t each) besides the block's GEMMs
    h, t = 4096, 2
    kept = 2 * (h / t + 4096 / t + 1024 / t + 14336 / t + h + 4096 / t + 2 * h / t) + 4 * 32 / t
    assert activation_bytes_per_layer(w) == pytest.approx(8192 * kept)


def test_selective_is_the_stacks_policy():
    """``recompute: selective`` without modules recomputes what the stack's selective
    checkpointing does: torchtitan's per-op SAC, Megatron-Core's attention core; named
    modules win."""
    w, _ = _w({"training.recompute_modules": None})
    assert w.training.recompute_plan.modules == ("op_sac",)
    assert activation_bytes_per_layer(w) == activation_bytes_per_layer(_w()[0])
    mega, _ = _w({"training.recompute_modules": None, "training.stack": "megatron"})
    assert mega.training.recompute_plan.modules == ("core_attn",)
    named, _ = _w({"training.recompute_modules": ["core_attn"]})
    assert named.training.recompute_plan.modules == ("core_attn",)
    # memory at another recompute setting asks the same stack
    none, _ = _w({"training.recompute": "none", **OTHER})
    assert activation_bytes_per_layer(none, recompute="selective") == \
        activation_bytes_per_layer(w)


def test_stack_selective_on_moe_names_the_recompute_field():
    moe = {"model.moe": {"num_experts": 8, "router_topk": 2, "ffn_hidden_size": 1024},
           "parallelism.expert": 8, "training.recompute_modules": None}
    with pytest.raises(ConfigError) as err:
        _w(moe)
    assert err.value.field == "training.recompute"
    assert "per-op policy" in err.value.message()


def test_profile_selective_modules_are_checked():
    from simulator.config.stacks import _doc, parse
    doc = dict(_doc("torchtitan"))
    for bad in ([], ["op_sac", "mlp"], ["attention"], "op_sac"):
        doc["recompute"] = {"selective_modules": {"value": bad, "source": "test"}}
        with pytest.raises(ConfigError, match=r"recompute.selective_modules"):
            parse("torchtitan", doc)
    # a run may set it like any profile key
    w, _ = _w({"training.recompute_modules": None,
               "training.stack_settings": {"recompute.selective_modules": ["core_attn"]}})
    assert w.training.recompute_plan.modules == ("core_attn",)
    with pytest.raises(ConfigError, match=r"training.stack_settings.recompute.selective_modules"):
        _w({"training.recompute_modules": None,
            "training.stack_settings": {"recompute.selective_modules": ["op_sac", "mlp"]}})


def test_search_tries_per_op_sac_on_torchtitan_and_skips_it_on_moe():
    from simulator.sweep import search
    base = {**{f"model.{k}": v for k, v in MODEL.items() if k != "name"},
            "training.stack": "torchtitan", "training.global_batch_size": 16,
            "training.use_megatron_fsdp": True,
            "training.data_parallel_sharding_strategy": "optim_grads_params"}
    res = search("llama3-8b", "dgx-h100", 8, top=40, executor="serial", overrides=base,
                 micro_batch_sizes=(1, 2, 4))
    sel = res.plans[res.plans.recompute == "selective"]
    assert len(sel) > 0  # per-op SAC fits where none does not, and is cheaper than full
    # the same search on Megatron's attention-core recompute fits fewer plans with selective
    mega = search("llama3-8b", "dgx-h100", 8, top=40, executor="serial",
                  overrides={**base, "training.stack": "megatron"}, micro_batch_sizes=(1, 2, 4))
    assert res.counts["over_memory"] < mega.counts["over_memory"]
    moe = search("mixtral-8x7b", "dgx-h100", 16, top=2, executor="serial",
                 overrides={"training.stack": "torchtitan"}, micro_batch_sizes=(1,))
    c = moe.counts
    assert "selective" not in set(moe.plans.recompute)
    mega_moe = search("mixtral-8x7b", "dgx-h100", 16, top=2, executor="serial",
                      micro_batch_sizes=(1,))
    assert c["invalid"] > mega_moe.counts["invalid"]  # the skipped per-op candidates
    assert c["plans"] == (c["invalid"] + c["over_memory"] + c["recompute_dominated"]
                          + c["pruned_by_bound"] + c["not_simulated_cap"] + c["simulated"])


def test_run_names_the_selective_policy(capsys):
    from simulator.cli.main import main
    args = ["run", "llama3-8b", "-t", "dgx-h100", "--set", "training.recompute=selective",
            "--set", "parallelism.tensor=1", "--set", "parallelism.data=8"]
    assert main([*args, "--set", "training.stack=torchtitan"]) == 0
    assert "recompute selective [op_sac]" in capsys.readouterr().out
    assert main(args) == 0
    assert "recompute selective [core_attn]" in capsys.readouterr().out
