"""YAML and override problems: every one is a ConfigError naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import ConfigError
from simulator.config import load_topology, load_workload
from simulator.config.loader import MAX_VALUES

ROOT = Path(__file__).resolve().parents[1]
TINY = (ROOT / "workloads" / "tiny.yaml").read_text()
H100 = (ROOT / "topologies" / "dgx-h100.yaml").read_text()


def _error(tmp_path: Path, text: str | bytes, kind: str = "workload") -> ConfigError:
    path = tmp_path / f"{kind}.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    load = load_workload if kind == "workload" else load_topology
    with pytest.raises(ConfigError) as info:
        load(path)
    return info.value


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_syntax_error_has_file_and_line(tmp_path):
    exc = _error(tmp_path, "model:\n  name: x\n   bad: [1, 2\n")
    assert exc.source == f"{tmp_path / 'workload.yaml'}:3"
    assert "syntax error" in exc.message() and "mapping values are not allowed" in exc.message()


def test_tab_indentation_is_a_syntax_error_with_line(tmp_path):
    exc = _error(tmp_path, "model:\n\tname: x\n")
    assert exc.source.endswith(":2") and "'\\t'" in exc.message()


def test_two_documents_in_one_file(tmp_path):
    exc = _error(tmp_path, "model: {}\n---\nmodel: {}\n")
    assert exc.source.endswith(":2") and "expected a single document" in exc.message()


def test_duplicate_nested_key_names_full_path_and_both_lines(tmp_path):
    text = TINY.replace("  num_layers: 4\n", "  num_layers: 4\n  num_layers: 6\n")
    exc = _error(tmp_path, text)
    line = _line_of(text, "num_layers: 6")
    assert exc.field == "model.num_layers" and exc.source.endswith(f":{line}")
    assert f"appears twice (first on line {line - 1})" in exc.message()


@pytest.mark.parametrize("text, what", [
    ("", "empty file"), ("# only a comment\n", "empty file"), ("\n\n", "empty file"),
    ("- 1\n- 2\n", "'list'"), ("42\n", "'int'"), ("just words\n", "'str'"),
])
def test_empty_or_non_mapping_file(tmp_path, text, what):
    exc = _error(tmp_path, text)
    assert exc.field == "document" and what in exc.message()
    assert "expected a YAML mapping" in exc.message()
    assert exc.source == str(tmp_path / "workload.yaml")


def test_wrong_type_names_field_line_and_expected_type(tmp_path):
    text = TINY.replace("num_layers: 4", "num_layers: four")
    exc = _error(tmp_path, text)
    assert exc.field == "model.num_layers" and exc.value == "four"
    assert exc.source.endswith(f":{_line_of(text, 'num_layers')}")
    assert "must be an integer" in exc.message()


@pytest.mark.parametrize("old, new, field, allowed", [
    ("num_layers: 4", "num_layers: 4.5", "model.num_layers", "must be a whole number"),
    ("sequence_parallel: true", "sequence_parallel: maybe", "parallelism.sequence_parallel",
     "must be true or false"),
    ("name: tiny-gpt", "name: [a, b]", "model.name", "must be a string"),
    ("parallelism:\n  tensor: 2\n  pipeline: 2\n  data: 1\n  sequence_parallel: true\n",
     "parallelism: 4\n", "parallelism", "must be a section of fields"),
    ("num_layers: 4", "num_layers: -4", "model.num_layers", "greater than 0"),
    ("num_layers: 4", "num_layers: .nan", "model.num_layers", "must be"),
])
def test_wrong_types_and_ranges(tmp_path, old, new, field, allowed):
    assert old in TINY
    exc = _error(tmp_path, TINY.replace(old, new))
    assert exc.field == field and allowed in exc.message(), exc.message()


def test_unknown_key_in_section_suggests_and_wins_over_missing(tmp_path):
    text = TINY.replace("seq_length:", "seq_lenght:")
    exc = _error(tmp_path, text)  # seq_length is also missing: the typo is the real error
    assert exc.field == "model.seq_lenght"
    assert exc.source.endswith(f":{_line_of(text, 'seq_lenght')}")
    assert "unknown field (did you mean 'seq_length'?)" in exc.message()
    assert "allowed here:" in exc.message() and "vocab_size" in exc.message()


def test_unknown_top_level_section_suggests(tmp_path):
    exc = _error(tmp_path, TINY.replace("training:", "trainig:"))
    assert exc.field == "trainig" and "did you mean 'training'?" in exc.message()


def test_unknown_key_in_list_item_names_index_and_line(tmp_path):
    text = H100.replace("  - name: leaf\n    size: 256\n    bandwidth_GBps: 50",
                        "  - name: leaf\n    size: 256\n    bandwdith_GBps: 50")
    assert text != H100
    exc = _error(tmp_path, text, "topology")
    assert exc.field == "tiers.1.bandwdith_GBps"
    assert exc.source.endswith(f":{_line_of(text, 'bandwdith_GBps')}")
    assert "did you mean 'bandwidth_GBps'?" in exc.message()


def test_unknown_key_in_nested_moe_block(tmp_path):
    text = TINY.replace("  seq_length: 1024\n",
                        "  seq_length: 1024\n  moe:\n    num_experts: 8\n    router_top_k: 2\n")
    exc = _error(tmp_path, text)
    assert exc.field == "model.moe.router_top_k" and "did you mean 'router_topk'?" in str(exc)


def test_missing_field_points_at_its_section(tmp_path):
    text = TINY.replace("  vocab_size: 32000\n", "")
    exc = _error(tmp_path, text)
    assert exc.field == "model.vocab_size" and "is required but missing" in exc.message()
    assert exc.source.endswith(f":{_line_of(text, 'model:')}")


def test_workload_given_as_topology_says_so(tmp_path):
    exc = _error(tmp_path, TINY, "topology")
    assert "looks like a workload document, not a topology document" in exc.message()


def test_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    exc = _error(tmp_path, "\n".join(lines) + "\n")
    assert f"more than {MAX_VALUES} values" in exc.message()


def test_recursive_alias_is_refused(tmp_path):
    exc = _error(tmp_path, "a: &a [*a]\n")
    assert exc.field == "document" and "recursive" in exc.message()


def test_anchors_and_merge_keys_still_work(tmp_path):
    text = H100.replace("  - name: leaf\n", "  - &leaf\n    name: leaf\n")
    text = text.replace("  - name: spine\n    size: 32768\n    bandwidth_GBps: 50\n",
                        "  - <<: *leaf\n    name: spine\n    size: 32768\n")
    path = tmp_path / "t.yaml"
    path.write_text(text)
    topo = load_topology(path)
    assert topo.tiers[2].size == 32768 and topo.tiers[2].bandwidth_GBps == 50


def test_complex_key_is_refused_with_line(tmp_path):
    exc = _error(tmp_path, "model:\n  ? [a, b]\n  : 1\n")
    assert exc.source.endswith(":2") and "keys must be plain names" in exc.message()


def test_binary_file_is_refused(tmp_path):
    exc = _error(tmp_path, b"\xff\xfe\x00garbage")
    assert "is not UTF-8 text" in exc.message()


def test_deep_nesting_is_refused(tmp_path):
    exc = _error(tmp_path, "model: " + "[" * 600 + "]" * 600 + "\n")
    assert exc.field == "document" and "nested too deeply" in exc.message()


def test_unknown_shipped_name_suggests():
    with pytest.raises(ConfigError) as info:
        load_topology("dgx-h10")
    assert info.value.field == "topology" and "did you mean 'dgx-h100'?" in str(info.value)
    with pytest.raises(ConfigError, match="did you mean 'tiny'"):
        load_workload("tinyy")


def test_wrong_reference_type_is_config_error():
    with pytest.raises(ConfigError, match="expected a path, a shipped name, a dict"):
        load_workload(42)  # type: ignore[arg-type]


# --- overrides (--set / **overrides) ---------------------------------------------------------

def test_override_of_unknown_field_suggests_and_says_override():
    with pytest.raises(ConfigError) as info:
        load_workload("tiny", {"parallelism.tensr": 2})
    exc = info.value
    assert exc.field == "parallelism.tensr" and exc.source == "override"
    assert "did you mean 'tensor'?" in exc.message()


def test_topology_override_of_unknown_list_item_field():
    with pytest.raises(ConfigError) as info:
        load_topology("dgx-h100", {"tiers.1.bandwdith_GBps": 100})
    assert info.value.field == "tiers.1.bandwdith_GBps" and info.value.source == "override"
    assert "did you mean 'bandwidth_GBps'?" in info.value.message()


def test_override_with_bad_value_says_override_not_a_file_line():
    with pytest.raises(ConfigError) as info:
        load_workload("tiny", {"parallelism.tensor": "abc"})
    assert info.value.source == "override" and "must be an integer" in info.value.message()


def test_error_in_file_is_still_attributed_to_the_file_when_overrides_exist(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(TINY.replace("num_layers: 4", "num_layers: 0"))
    with pytest.raises(ConfigError) as info:
        load_workload(path, {"parallelism.tensor": 4})
    assert info.value.source == f"{path}:{_line_of(TINY, 'num_layers')}"


@pytest.mark.parametrize("overrides, allowed", [
    ({"tiers.7.size": 2}, "'7' is not an index below 3"),
    ({"tiers.x.size": 2}, "'x' is not an index below 3"),
    ({"name.first": 2}, "'name' is not a section that has fields"),
    ({"gpu..name": "x"}, "needs a name between the dots"),
])
def test_bad_override_paths(overrides, allowed):
    with pytest.raises(ConfigError, match=allowed):
        load_topology("dgx-h100", overrides)


def test_override_adds_a_missing_section():
    w = load_workload("tiny", {"model.moe.num_experts": 4})
    assert w.model.moe is not None and w.model.moe.num_experts == 4
