"""Every constant in ``topologies/*.yaml`` names its source.

The walk is generic, so constants added later (new GPU fields, new tier fields, new blocks)
are held to the same rule: in any mapping, every key other than ``name``, ``description`` and
``sources`` must be covered by that mapping's ``sources`` entry, either under its own name or
under a prefix ending at ``_`` (``hbm`` covers ``hbm_GB`` and ``hbm_bandwidth_TBps``). A nested
mapping without a covering entry (``peak_tflops`` is covered by ``sources.peak_tflops``) must
source its own keys; lists (``tiers``) are walked element by element.

A source must say where the number comes from (:func:`kind`): a document (datasheet, paper,
table, file, repository, URL), a measurement, the fit command that produced it, another entry
it is carried from (a sibling key or a shipped topology), or a declared assumption
("assumption: ..."). A source that claims a fit must name the command, or be "the same fit"
as a sibling that names it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1] / "topologies"
FILES = sorted(ROOT.glob("*.yaml"))
NOT_CONSTANTS = {"name", "description", "sources"}
TOPOLOGIES = {p.stem for p in FILES}
COMMAND = re.compile(r"python -m simulator\.[\w.]+|clustersim [a-z-]+")
DOCUMENT = re.compile(
    r"datasheet|white ?paper|guide|paper|\bdocs?\b|documentation|README|Table \d|Sec\.|"
    r"Section|et al\.|https?://|\b[A-Za-z][\w.-]*/[\w.-]+|\.(md|py|yaml|cc|h|sh)\b|"
    r"reference architecture|spec(ification)?s?\b|manual|'[A-Z][^']{8,}'|arXiv|PR #|issue #|#\d+|"
    r"\((19|20)\d\d\)|\b(19|20)\d\d\b", re.I)
MEASUREMENT = re.compile(r"measur|nccl-tests|nvidia-smi|benchmark|nsight|cudaMemGetInfo|"
                         r"logged|profil", re.I)
ASSUMPTION = re.compile(r"^\s*(assumption|estimate)", re.I)
POINTER = re.compile(r"\b(?:as|see|from|same [\w -]*?as)\s+([\w.-]+)")
CLAIMS_FIT = re.compile(r"^\s*(?!not )(?:[\w-]+ |same )?fit(?:ted)?\b", re.I)


def _pointer(text: str, sources: dict) -> bool:
    return any(t.strip(".,;:") in sources for t in POINTER.findall(text)) or any(
        re.search(rf"\b{re.escape(t)}\b", text) for t in TOPOLOGIES)


def kind(text: str, sources: dict) -> str | None:
    """What a source names: 'fit command', 'measurement', 'document', 'carried' (a sibling
    key or a shipped topology), 'assumption'; None when it names nothing of these."""
    if COMMAND.search(text):
        return "fit command"
    if CLAIMS_FIT.search(text):
        if re.search(r"\.py\b", text):
            return "fit command"  # the file that fits or checks it
        same = re.search(r"same [\w -]*fit", text)
        if not (same and any(COMMAND.search(str(v)) or re.search(r"\.py\b", str(v))
                             for v in sources.values())):
            return None  # a fit without its command
        return "fit command"
    for name, rx in (("measurement", MEASUREMENT), ("document", DOCUMENT)):
        if rx.search(text):
            return name
    if _pointer(text, sources):
        return "carried"
    return "assumption" if ASSUMPTION.search(text) else None


def unnamed(node) -> list[str]:
    """Source entries (anywhere in ``node``) that name no document, measurement, fit
    command, carried-from entry or declared assumption."""
    if isinstance(node, list):
        return [m for item in node for m in unnamed(item)]
    if not isinstance(node, dict):
        return []
    sources = node.get("sources") or {}
    bad = [f"{k}: {str(v)[:80]}" for k, v in sources.items() if kind(str(v), sources) is None]
    return bad + [m for k, v in node.items() if k != "sources" for m in unnamed(v)]


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


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_source_names_where_the_number_comes_from(path):
    bad = unnamed(yaml.safe_load(path.read_text()))
    assert not bad, f"{path.name}: " + "; ".join(bad)


def test_the_source_kinds():
    sib = {"a": "fit: python -m simulator.validation.fit dgx-h100 --params gpu.a"}
    assert kind("NVIDIA H100 datasheet", {}) == "document"
    assert kind("nccl-tests all_reduce_perf on 8 GPUs", {}) == "measurement"
    assert kind("fit to the training cases", {}) is None  # a fit must name its command
    assert kind("same fit as a", sib) == "fit command"
    assert kind("same fit as a", {"a": "a guess"}) is None
    assert kind("carried from gb200-nvl72", {}) == "carried"
    assert kind("carried from nowhere-9000", {}) is None
    assert kind("assumption: ring overhead as on NVLink4", {}) == "assumption"
    assert kind("a good number", {}) is None and kind("", {}) is None


CARRIED = re.compile(r"^\s*carried from ([\w.-]+)")


def carried_mismatches(name: str, docs: dict[str, dict]) -> list[str]:
    """Constants of topology ``name`` whose source says they are carried from another shipped
    topology but whose value differs there (the donor refitted, the copy left behind). A
    source covers its own key or the keys it is a ``_``-prefix of, as in :func:`unsourced`."""
    out = []
    doc = docs[name]
    for section in ("gpu", "reliability", "storage", "power", "fabric"):
        block = doc.get(section) or {}
        for key, text in (block.get("sources") or {}).items():
            m = CARRIED.match(str(text))
            if not m or m.group(1) not in docs:
                continue
            donor = docs[m.group(1)].get(section) or {}
            for k in [k for k in block if k == key or k.startswith(key + "_")]:
                if block[k] != donor.get(k):
                    out.append(f"{section}.{k} = {block[k]!r}, {m.group(1)} has {donor.get(k)!r}")
    return out


def test_a_carried_constant_equals_its_donor():
    docs = {p.stem: yaml.safe_load(p.read_text()) for p in FILES}
    bad = {n: carried_mismatches(n, docs) for n in docs}
    assert not any(bad.values()), {n: b for n, b in bad.items() if b}
    # the check sees a stale copy
    stale = {**docs, "x": {"gpu": {"gemm_efficiency": 0.5, "sources": {
        "gemm_efficiency": "carried from dgx-h100 (same die)"}}}}
    assert carried_mismatches("x", stale) == [
        f"gpu.gemm_efficiency = 0.5, dgx-h100 has {docs['dgx-h100']['gpu']['gemm_efficiency']!r}"]
