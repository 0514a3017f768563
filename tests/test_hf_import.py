"""Hugging Face config.json -> model section: exact for Llama 3 8B, mapped for each family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator import ConfigError
from simulator.cli.main import main as cli
from simulator.config import load_workload
from simulator.config.hf import load_hf_model, model_from_hf

ROOT = Path(__file__).resolve().parents[1]
LLAMA3_8B = ROOT / "tests" / "data" / "hf" / "llama3-8b" / "config.json"
# the seq_length default's note (tests/test_hf_robust.py checks it)
pytestmark = pytest.mark.filterwarnings("ignore::simulator.config.hf.HFNote")

# Published config.json values (the keys the mapping reads).
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
               "intermediate_size": 18432, "moe_intermediate_size": 2048,
               "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
               "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
               "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8, "topk_group": 4,
               "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
               "max_position_embeddings": 163840, "num_nextn_predict_layers": 1,
               "rope_scaling": {"type": "yarn", "factor": 40,
                                "original_max_position_embeddings": 4096},
               "tie_word_embeddings": False, "hidden_act": "silu", "attention_dropout": 0.0}
GPT_OSS_120B = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880,
                "intermediate_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128,
                "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088,
                "max_position_embeddings": 131072, "hidden_act": "silu",
                "rope_scaling": {"rope_type": "yarn", "factor": 32.0,
                                 "original_max_position_embeddings": 4096},
                "tie_word_embeddings": False, "sliding_window": 128}
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
                "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
                "vocab_size": 32000, "max_position_embeddings": 32768, "hidden_act": "silu",
                "tie_word_embeddings": False}
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
                 "intermediate_size": 6144, "moe_intermediate_size": 768,
                 "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
                 "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                 "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
                 "max_position_embeddings": 40960, "hidden_act": "silu",
                 "tie_word_embeddings": False}
QWEN2_57B_A14B = {"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 3584,
                  "intermediate_size": 18944, "moe_intermediate_size": 2560,
                  "shared_expert_intermediate_size": 20480, "num_hidden_layers": 28,
                  "num_attention_heads": 28, "num_key_value_heads": 4, "num_experts": 64,
                  "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "vocab_size": 151936, "max_position_embeddings": 65536,
                  "hidden_act": "silu", "tie_word_embeddings": False}

# EleutherAI/gpt-neox-20b config.json (the keys the mapping reads)
GPT_NEOX_20B = {"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 6144,
                "intermediate_size": 24576, "num_hidden_layers": 44, "num_attention_heads": 64,
                "vocab_size": 50432, "max_position_embeddings": 2048, "rotary_pct": 0.25,
                "hidden_act": "gelu_fast", "use_parallel_residual": True,
                "tie_word_embeddings": False}


def test_llama3_8b_config_gives_exactly_the_shipped_model_section():
    shipped = yaml.safe_load((ROOT / "workloads" / "llama3-8b.yaml").read_text())["model"]
    assert load_hf_model(LLAMA3_8B, seq_length=8192) == shipped


def test_hf_config_key_in_a_workload_yaml(tmp_path):
    doc = yaml.safe_load((ROOT / "workloads" / "llama3-8b.yaml").read_text())
    doc["model"] = {"hf_config": str(LLAMA3_8B.relative_to(ROOT)), "seq_length": 4096}
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # a path relative to the YAML's folder
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(doc))
    w = load_workload(path)
    assert w.model == load_workload("llama3-8b", {"model.seq_length": 4096}).model


def test_moe_families_map_and_load():
    mixtral = model_from_hf(MIXTRAL_8X7B, "mixtral")
    assert mixtral["moe"] == {"num_experts": 8, "router_topk": 2, "ffn_hidden_size": 14336}
    qwen3 = model_from_hf(QWEN3_30B_A3B)
    assert qwen3["kv_channels"] == 128 and qwen3["moe"]["ffn_hidden_size"] == 768
    assert qwen3["qk_layernorm"] is True  # Qwen3's q_norm / k_norm
    qwen2 = model_from_hf(QWEN2_57B_A14B)
    assert "qk_layernorm" not in qwen2 and "qk_layernorm" not in mixtral
    assert qwen2["moe"]["shared_expert_ffn_hidden_size"] == 20480
    oss = model_from_hf(GPT_OSS_120B, "gpt-oss-120b")
    assert oss["kv_channels"] == 64 and oss["seq_length"] == 4096
    assert oss["moe"] == {"num_experts": 128, "router_topk": 4, "ffn_hidden_size": 2880}
    for model in (mixtral, qwen3, qwen2, oss):
        w = load_workload({"model": model, "parallelism": {"tensor": 4, "expert": 2,
                                                           "expert_tensor": 1, "data": 2},
                           "training": {"global_batch_size": 8}})
        assert w.model.moe is not None


def test_deepseek_v3_maps_to_megatron_mla_names():
    m = model_from_hf(DEEPSEEK_V3, "deepseek-v3")
    assert {k: m[k] for k in ("multi_latent_attention", "q_lora_rank", "kv_lora_rank",
                              "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
                              "mtp_num_layers", "seq_length")} == {
        "multi_latent_attention": True, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128,
        "mtp_num_layers": 1, "seq_length": 4096}
    assert m["moe"] == {"num_experts": 256, "router_topk": 8, "ffn_hidden_size": 2048,
                        "shared_expert_ffn_hidden_size": 2048, "first_k_dense": 3,
                        "layer_freq": 1, "router_num_groups": 8, "router_group_topk": 4}


def test_deepseek_v3_loads_with_the_mla_schema():
    w = load_workload({"model": model_from_hf(DEEPSEEK_V3, "deepseek-v3"),
                       "parallelism": {"pipeline": 1, "expert": 8, "data": 8},
                       "training": {"global_batch_size": 8}})
    assert w.model.moe.num_experts == 256


@pytest.mark.parametrize("config, field", [
    ({"architectures": ["GPT2LMHeadModel"]}, "model.hf_config.architectures"),
    ({"hidden_size": 8}, "model.hf_config.architectures"),
    ({**MIXTRAL_8X7B, "num_local_experts": None}, "model.hf_config.num_local_experts"),
    ({k: v for k, v in QWEN3_30B_A3B.items() if k != "hidden_size"},
     "model.hf_config.hidden_size"),
    ({**QWEN2_57B_A14B, "mlp_only_layers": [0, 5]}, "model.hf_config.mlp_only_layers"),
    ({**MIXTRAL_8X7B, "hidden_act": "gelu"}, "model.hf_config.hidden_act"),
    ({**GPT_NEOX_20B, "hidden_act": "silu"}, "model.hf_config.hidden_act"),
    ({**GPT_NEOX_20B, "use_parallel_residual": "yes"}, "model.hf_config.use_parallel_residual"),
])
def test_unmappable_configs_name_the_field(config, field):
    with pytest.raises(ConfigError) as err:
        model_from_hf(config)
    assert err.value.field == field and "\n" not in err.value.message()


def test_gpt_neox_maps_its_plain_mlp_biases_and_parallel_residual():
    m = model_from_hf(GPT_NEOX_20B, "gpt-neox-20b", seq_length=2048)
    assert m == {"name": "gpt-neox-20b", "num_layers": 44, "hidden_size": 6144,
                 "num_attention_heads": 64, "num_query_groups": 64, "ffn_hidden_size": 24576,
                 "gated_linear_unit": False, "add_bias_linear": True, "vocab_size": 50432,
                 "hidden_dropout": 0.0, "attention_dropout": 0.0,
                 "untie_embeddings_and_output_weights": True, "use_parallel_residual": True,
                 "seq_length": 2048}
    # Pythia's configs set it too; a sequential GPT-NeoX (use_parallel_residual false) maps so
    assert not model_from_hf({**GPT_NEOX_20B, "use_parallel_residual": False})[
        "use_parallel_residual"]


def test_workload_subcommand_writes_a_loadable_yaml(tmp_path, capsys):
    out = tmp_path / "w.yaml"
    assert cli(["workload", "--from-hf", str(LLAMA3_8B), "--plan", "llama3-8b",
                "-o", str(out)]) == 0
    assert load_workload(out) == load_workload("llama3-8b")
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"architectures": ["BertModel"]}))
    never = tmp_path / "never.yaml"
    capsys.readouterr()
    assert cli(["workload", "--from-hf", str(bad), "--plan", "tiny", "-o", str(never)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.hf_config.architectures" in err
    assert sorted(tmp_path.iterdir()) == sorted([out, bad])  # nothing written
