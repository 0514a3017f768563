"""The two YAML parsers behind ``parse_yaml`` read every document the same way.

libyaml (``yaml.CSafeLoader``) reads shallow, tag-free documents; PyYAML's
pure-Python parser reads the rest and explains every failure. These tests check
that a caller cannot tell which one ran: same values, same line map, same errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import ConfigError
from simulator.config import loader
from simulator.config.loader import _parse_c, _parse_python, parse_yaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p for d in ("workloads", "topologies", "sweeps")
                 for p in (ROOT / d).glob("*.yaml"))
needs_libyaml = pytest.mark.skipif(loader.C_LOADER is None, reason="PyYAML without libyaml")


@needs_libyaml
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_documents_read_by_libyaml_as_by_pyyaml(path):
    text = path.read_text()
    expected = _parse_python(text, str(path))
    assert parse_yaml(text, str(path)) == expected  # values and the line of every field
    if path.parent.name != "sweeps":  # what every run reads takes the fast path
        assert _parse_c(text, str(path)) == expected


ODD = {
    "anchors and merge keys": "a: &x {p: 1, q: [1, 2]}\nb:\n  <<: *x\n  r: null\n",
    "block scalars": "d: |\n  two\n  lines\ne: >\n  folded\n  text\nf: ''\n",
    "empty values": "a:\nb: ~\nc: []\nd: {}\ne:\n  - \n  - x\n",
    "numbers": "a: 1e3\nb: 0x1F\nc: .inf\nd: 2024-01-01\ne: 1_000\nf: yes\n",
    "flow and comments": "a: {b: [1, {c: d}], e: 'f: g'}  # comment\n# end\n",
}


@needs_libyaml
@pytest.mark.parametrize("text", list(ODD.values()), ids=list(ODD))
def test_less_common_constructs_read_alike(text):
    assert _parse_c(text, "x.yaml") == _parse_python(text, "x.yaml")


@pytest.mark.parametrize("text", [
    "a: !!int 3\n",  # a tag: libyaml and PyYAML differ on some
    "a:\n\tb: 1\n",  # a tab
    "b: |#\n  ?: x\n",  # a comment glued to a block-scalar header: only libyaml reads it
    "a: {b?}\n",  # a ? in a flow collection: only libyaml reads it
    "a: " + "[" * 150 + "]" * 150 + "\n",  # deeper than the fast path reads
    "a: " + "[" * 600 + "]" * 600 + "\n",  # more openers than it even composes
], ids=["tag", "tab", "glued comment", "flow ?", "150 deep", "600 deep"])
def test_documents_left_to_pyyaml(text):
    assert _parse_c(text, "x.yaml") is None
    try:
        expected = _parse_python(text, "x.yaml")
    except ConfigError as exc:
        with pytest.raises(ConfigError) as info:
            parse_yaml(text, "x.yaml")
        assert info.value.message() == exc.message()
    else:
        assert parse_yaml(text, "x.yaml") == expected


@pytest.mark.parametrize("text", [
    "model:\n  name: x\n   bad: [1, 2\n",  # syntax error
    "a:\n  b: 1\n  b: 2\n",  # duplicate key
    "model:\n  ? [a, b]\n  : 1\n",  # complex key
    "- 1\n- 2\n",  # not a mapping
    "",  # empty
    "a: 2024-02-30\n",  # impossible date
], ids=["syntax", "duplicate", "complex key", "list", "empty", "date"])
def test_errors_are_pyyamls_with_its_lines(text):
    with pytest.raises(ConfigError) as python:
        _parse_python(text, "x.yaml")
    with pytest.raises(ConfigError) as both:
        parse_yaml(text, "x.yaml")
    assert both.value.message() == python.value.message()
