"""Cross-field rules of ``check_plan`` (and the schema's own): one case per rule.

Each case starts from ``tiny`` (16 heads, 4 layers, TP2 PP2 SP, GBS 8, MBS 2) and
breaks exactly one rule through ``resolve`` (the path every command takes). The
message must name the field and say what is allowed.
"""

from __future__ import annotations

import pytest

from simulator import ConfigError
from simulator.api import resolve
from simulator.config.validate import MAX_PHASES

MOE = {"model.moe.num_experts": 8}
CP_OFF_SP = {"parallelism.context": 2, "parallelism.sequence_parallel": False}

# id: (workload overrides, topology, field, text the message must contain)
RULES = {
    "gpu-count": ({"parallelism.data": 10_000}, "dgx-h100", "parallelism",
                  "needs at most the topology's 32768 GPUs"),
    "tp-heads": ({"parallelism.tensor": 3}, "dgx-h100", "parallelism.tensor",
                 "must divide model.num_attention_heads (16)"),
    "tp-kv-groups": ({"parallelism.tensor": 4, "model.num_query_groups": 2}, "dgx-h100",
                     "parallelism.tensor",
                     "must divide model.num_query_groups (2): each TP rank holds whole KV heads"),
    "tp-ffn": ({"parallelism.tensor": 4, "model.ffn_hidden_size": 1030}, "dgx-h100",
               "parallelism.tensor", "must divide model.ffn_hidden_size (1030)"),
    "tp-shared-expert": ({**MOE, "model.moe.shared_expert_ffn_hidden_size": 1001}, "dgx-h100",
                         "parallelism.tensor",
                         "must divide model.moe.shared_expert_ffn_hidden_size (1001)"),
    "sp-seq": ({"model.seq_length": 1023}, "dgx-h100", "model.seq_length",
               "must be divisible by tensor * context (2 * 1) with sequence_parallel"),
    "tp-larger-than-nvlink": ({"parallelism.tensor": 16}, "dgx-h100", "parallelism.tensor",
                              "the TP group must sit inside one nvlink domain of 8 GPUs"),
    "tp-straddles-nvlink": ({"parallelism.tensor": 16}, "gb200-nvl72", "parallelism.tensor",
                            "tensor must divide 72"),
    "fp8-hardware": ({"training.precision": "fp8"}, "dgx-a100", "training.precision",
                     "has no fp8 tensor cores"),
    "gbs-mbs-dp": ({"training.global_batch_size": 9}, "dgx-h100", "training.global_batch_size",
                   "must be divisible by micro_batch_size * data (2 * 1 = 2)"),
    "tokens-per-microbatch": ({"model.seq_length": 2**30}, "dgx-h100",
                              "training.micro_batch_size", "must be at most 1073741824 tokens"),
    "engine-phases": ({"training.global_batch_size": 2**21}, "dgx-h100",
                      "training.global_batch_size", f"the engine replays at most {MAX_PHASES}"),
    "pp-vp-layers": ({"parallelism.pipeline_schedule": "interleaved",
                      "parallelism.virtual_pipeline": 3}, "dgx-h100", "parallelism.pipeline",
                     "pipeline * virtual_pipeline (2 * 3) must not exceed num_layers (4)"),
    "interleaved-microbatches": ({"parallelism.pipeline_schedule": "interleaved",
                                  "parallelism.virtual_pipeline": 2,
                                  "training.global_batch_size": 6}, "dgx-h100",
                                 "training.global_batch_size",
                                 "to be a multiple of pipeline (2)"),
    "uneven-split-partition": ({"parallelism.pipeline": 3,
                                "parallelism.decoder_first_pipeline_num_layers": 1},
                               "dgx-h100", "parallelism.decoder_first_pipeline_num_layers",
                               "leave 3 layers for 2 middle stages: they must divide evenly"),
    "uneven-split-with-vp": ({"parallelism.pipeline_schedule": "interleaved",
                              "parallelism.virtual_pipeline": 2,
                              "parallelism.decoder_first_pipeline_num_layers": 1},
                             "dgx-h100", "parallelism.virtual_pipeline",
                             "must divide each stage's layers"),
    "cp-flash": ({"parallelism.context": 2, "training.use_flash_attn": False}, "dgx-h100",
                 "training.use_flash_attn", "needs fused (flash) attention"),
    "cp-seq-chunks": ({**CP_OFF_SP, "model.seq_length": 1026}, "dgx-h100", "model.seq_length",
                      "must be divisible by 4 for context=2 with ring_zigzag"),
    "cp-ulysses-heads": ({**CP_OFF_SP, "parallelism.context_parallel_algo": "ulysses",
                          "model.num_query_groups": 2}, "dgx-h100", "parallelism.context",
                         "Ulysses splits KV heads: must divide the 1 KV heads per TP rank"),
    "ep-needs-moe": ({"parallelism.expert": 2}, "dgx-h100", "parallelism.expert",
                     "needs model.moe"),
    "ep-divides-experts": ({"model.moe.num_experts": 6, "parallelism.data": 4,
                            "parallelism.expert": 4}, "dgx-h100", "parallelism.expert",
                           "must divide model.moe.num_experts (6)"),
    "ep-folding": ({**MOE, "parallelism.expert": 8}, "dgx-h100", "parallelism.expert",
                   "expert * expert_tensor (8 * 2) must divide tensor * context * data (2)"),
    "etp-expert-ffn": ({**MOE, "model.moe.ffn_hidden_size": 1001}, "dgx-h100",
                       "parallelism.expert_tensor",
                       "must divide the expert FFN width (model.moe.ffn_hidden_size) (1001)"),
    "params-per-gpu": ({"model.hidden_size": 2**19}, "dgx-h100", "model",
                       "at most 1e+12 are modelled"),
}


@pytest.mark.parametrize("case", list(RULES), ids=list(RULES))
def test_each_plan_rule_names_field_and_what_is_allowed(case):
    overrides, topology, field, allowed = RULES[case]
    with pytest.raises(ConfigError) as info:
        resolve("tiny", topology, overrides)
    exc = info.value
    assert exc.field == field, exc.message()
    assert field in exc.message() and allowed in exc.message(), exc.message()


# Schema-level rules of the parallel plan (workload.py validators).
SCHEMA = {
    "interleaved-needs-vp": ({"parallelism.pipeline_schedule": "interleaved"},
                             "parallelism.virtual_pipeline", "must be >= 2"),
    "vp-needs-interleaved": ({"parallelism.virtual_pipeline": 2},
                             "parallelism.pipeline_schedule", "must be 'interleaved'"),
    "vp-needs-pp": ({"parallelism.pipeline": 1, "parallelism.pipeline_schedule": "interleaved",
                     "parallelism.virtual_pipeline": 2}, "parallelism.virtual_pipeline",
                    "needs parallelism.pipeline > 1 (without pipelining set "
                    "parallelism.virtual_pipeline=null and parallelism.pipeline_schedule=1f1b)"),
    "interleaved-needs-pp": ({"parallelism.pipeline": 1,
                              "parallelism.pipeline_schedule": "interleaved"},
                             "parallelism.pipeline_schedule",
                             "needs parallelism.pipeline > 1 (without pipelining set "
                             "parallelism.virtual_pipeline=null and "
                             "parallelism.pipeline_schedule=1f1b)"),
    "kv-groups-divide-heads": ({"model.num_query_groups": 3}, "model.num_query_groups",
                               "must divide num_attention_heads (16)"),
    "topk-le-experts": ({"model.moe.num_experts": 2, "model.moe.router_topk": 4},
                        "model.moe.router_topk", "must be at most num_experts (2)"),
    "rank-order": ({"parallelism.rank_order": "tp-dp-pp"}, "parallelism.rank_order",
                   "must order tp, cp, ep, dp, pp once each"),
    "layers-bounded": ({"model.num_layers": 10**9}, "model.num_layers",
                       "less than or equal to 10000"),
    "capacity-bounded": ({**MOE, "model.moe.capacity_factor": 1e300}, "model.moe.capacity_factor",
                         "less than or equal to 1000"),
    "skew-bounded": ({**MOE, "model.moe.router_skew": 1e6}, "model.moe.router_skew",
                     "less than or equal to 100"),
    "nan-refused": ({"model.moe.num_experts": 8, "model.moe.capacity_factor": float("nan")},
                    "model.moe.capacity_factor", "finite number"),
}


@pytest.mark.parametrize("case", list(SCHEMA), ids=list(SCHEMA))
def test_schema_rules_name_field_and_what_is_allowed(case):
    overrides, field, allowed = SCHEMA[case]
    with pytest.raises(ConfigError) as info:
        resolve("tiny", "dgx-h100", overrides)
    assert info.value.field == field and allowed in info.value.message(), info.value.message()


@pytest.mark.parametrize("override, field, allowed", [
    ({"tiers.1.size": 100}, "tiers[1].size", "must be a multiple of tiers[0].size (8)"),
    ({"tiers.0.bandwidth_GBps": 1e300}, "tiers.0.bandwidth_GBps", "less than or equal to"),
    ({"tiers.0.latency_us": float("inf")}, "tiers.0.latency_us", "finite number"),
    ({"gpu.gemm_efficiency": 0}, "gpu.gemm_efficiency", "greater than or equal to"),
    ({"tiers": []}, "tiers", "at least 1 item"),
])
def test_topology_rules_name_field_and_what_is_allowed(override, field, allowed):
    with pytest.raises(ConfigError) as info:
        resolve("tiny", "dgx-h100", topology_overrides=override)
    assert info.value.field == field and allowed in info.value.message(), info.value.message()


def test_uneven_pipeline_split_is_valid_not_an_error():
    w, _ = resolve("tiny", "dgx-h100", {"model.num_layers": 5})
    assert w.model.num_layers == 5  # 3 + 2 layers over two stages


@pytest.mark.parametrize("name", ["tiny", "llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b",
                                  "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"])
def test_shipped_workloads_pass_check_plan(name):
    w, t = resolve(name, "dgx-h100")
    assert w.parallelism.num_gpus <= t.max_gpus
