"""HF import never crashes and never coerces: typed keys, visible seq_length (issue 33.2-3)."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml

from simulator import ConfigError
from simulator.cli.main import main as cli
from simulator.config.hf import DEFAULT_SEQ_LENGTH, HFNote, load_hf_model, model_from_hf

LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
         "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
         "hidden_act": "silu", "tie_word_embeddings": False}
# Qwen2.5-7B's config.json: a 131,072-token context, pre-trained far shorter
QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
             "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "vocab_size": 152064,
             "max_position_embeddings": 131072, "hidden_act": "silu",
             "tie_word_embeddings": False}


def _map(config, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HFNote)
        return model_from_hf(config, **kw)


@pytest.mark.parametrize("archs", [[["LlamaForCausalLM"]], [{"a": 1}], [None], [3],
                                   "LlamaForCausalLM", [[]]])
def test_unhashable_or_odd_architectures_are_config_errors(archs):
    with pytest.raises(ConfigError) as err:
        _map({**LLAMA, "architectures": archs})
    assert err.value.field == "model.hf_config.architectures"


@pytest.mark.parametrize("key", ["num_hidden_layers", "num_attention_heads", "hidden_size",
                                 "num_key_value_heads", "vocab_size", "intermediate_size",
                                 "max_position_embeddings", "head_dim"])
@pytest.mark.parametrize("value", [4.9, True, False, "32", float("nan"), float("inf"),
                                   -float("inf"), [32], {"n": 32}, -4, 0])
def test_ill_typed_integers_name_the_key_and_are_never_coerced(key, value):
    with pytest.raises(ConfigError) as err:
        _map({**LLAMA, key: value})
    assert err.value.field == f"model.hf_config.{key}" and "\n" not in err.value.message()


def test_whole_floats_are_taken_exactly():
    assert _map({**LLAMA, "num_hidden_layers": 32.0})["num_layers"] == 32


@pytest.mark.parametrize("key, value", [("tie_word_embeddings", "yes"),
                                        ("tie_word_embeddings", 1),
                                        ("attention_dropout", "0.1"),
                                        ("attention_dropout", float("nan")),
                                        ("attention_dropout", True)])
def test_ill_typed_flags_and_fractions_name_the_key(key, value):
    with pytest.raises(ConfigError) as err:
        _map({**LLAMA, key: value})
    assert err.value.field == f"model.hf_config.{key}"


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1" * 5000, "4.9", "true"])
def test_json_file_values_reach_the_cli_as_one_line(tmp_path, capsys, text):
    raw = json.dumps(LLAMA).replace('"num_hidden_layers": 32', f'"num_hidden_layers": {text}')
    path = tmp_path / "config.json"
    path.write_text(raw)
    assert cli(["workload", "--from-hf", str(path), "--plan", "tiny"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.hf_config.num_hidden_layers" in err, err
    assert len(err) < 400


def test_a_huge_integer_on_an_unread_key_is_harmless(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA)[:-1] + ', "bos_token_id": ' + "7" * 5000 + "}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HFNote)
        assert load_hf_model(path)["num_layers"] == 32


def test_seq_length_is_not_the_maximum_context_and_the_default_is_a_note():
    with pytest.warns(HFNote, match="model.seq_length = 4096 .*maximum context 131072"):
        model = model_from_hf(QWEN25_7B, "qwen2.5-7b")
    assert model["seq_length"] == DEFAULT_SEQ_LENGTH == 4096
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stated length needs no note
        assert model_from_hf(QWEN25_7B, seq_length=8192)["seq_length"] == 8192
    with pytest.warns(HFNote, match="exceeds the model's maximum context"):
        model_from_hf(LLAMA, seq_length=16384)


def test_seq_length_in_a_yaml_and_from_the_plan(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN25_7B))
    out = tmp_path / "w.yaml"
    assert cli(["workload", "--from-hf", str(cfg), "--plan", "llama3-8b", "-o", str(out)]) == 0
    assert "note: model.seq_length = 8192 from --plan llama3-8b" in capsys.readouterr().err
    assert "seq_length: 8192" in out.read_text()
    doc = yaml.safe_load(out.read_text())
    doc["model"] = {"hf_config": str(cfg)}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump(doc))
    assert cli(["memory", str(tmp_path / "h.yaml"), "-t", "dgx-h100"]) == 0
    assert "note: model.seq_length = 4096 (default" in capsys.readouterr().err
