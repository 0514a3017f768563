"""Every constant in ``topologies/*.yaml`` names its source.

The walk is generic, so constants added later (new GPU fields, new tier fields, new blocks)
are held to the same rule: in any mapping, every key other than ``name``, ``description`` and
``sources`` must be covered by that mapping's ``sources`` entry, either under its own name or
under a prefix ending at ``_`` (``hbm`` covers ``hbm_GB`` and ``hbm_bandwidth_TBps``). A nested
mapping without a covering entry (``peak_tflops`` is covered by ``sources.peak_tflops``) must
source its own keys; lists (``tiers``) are walked element by element. A source is a non-empty
sentence; an assumption says so ("assumption: ...").
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1] / "topologies"
FILES = sorted(ROOT.glob("*.yaml"))
NOT_CONSTANTS = {"name", "description", "sources"}


def covered(key: str, sources: dict) -> bool:
    return any(key == s or key.startswith(s + "_") for s in sources)


def unsourced(node, path: str = "") -> list[str]:
    """Dotted paths of constants in ``node`` that no ``sources`` entry covers."""
    if isinstance(node, list):
        return [m for i, item in enumerate(node) for m in unsourced(item, f"{path}{i}.")]
    if not isinstance(node, dict):
        return [path.rstrip(".")]
    sources = node.get("sources") or {}
    missing = [f"{path}sources.{k} (empty)" for k, v in sources.items() if not str(v).strip()]
    for key, value in node.items():
        if key in NOT_CONSTANTS or covered(key, sources):
            continue
        missing += unsourced(value, f"{path}{key}.")
    return missing


def test_there_are_topologies_to_check():
    assert len(FILES) >= 3


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_topology_constant_has_a_source(path):
    missing = unsourced(yaml.safe_load(path.read_text()))
    assert not missing, f"{path.name}: no sources entry for " + ", ".join(missing)


def test_the_walk_finds_unsourced_constants():
    doc = {"name": "x", "gpu": {"name": "g", "hbm_GB": 80, "hbm_bandwidth_TBps": 3,
                                "peak_tflops": {"bf16": 1}, "new_constant": 2,
                                "sources": {"hbm": "datasheet", "peak_tflops": "datasheet"}},
           "tiers": [{"name": "t", "size": 8, "sources": {"size": ""}}]}
    assert unsourced(doc) == ["gpu.new_constant", "tiers.0.sources.size (empty)"]
