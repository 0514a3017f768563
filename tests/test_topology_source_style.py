"""A topology source says what a value is and where it comes from, briefly.

Fit history (earlier values, what moved them) lives in ``docs/calibration-log.md`` and git, not in
the sources: a source is at most 500 characters and does not narrate earlier values.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

TOPOLOGIES = sorted((Path(__file__).resolve().parents[1] / "topologies").glob("*.yaml"))
HISTORY = re.compile(r"\b(was|were) [0-9]|before (the|that|any) |\brefit(ted)? (after|against)|"
                     r"Checked after|Unchanged by", re.I)


def _sources(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "sources" and isinstance(value, dict):
                for name, text in value.items():
                    yield ".".join(map(str, (*path, name))), text
            else:
                yield from _sources(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _sources(value, (*path, i))


@pytest.mark.parametrize("path", TOPOLOGIES, ids=lambda p: p.stem)
def test_sources_are_short_and_state_no_history(path):
    found = list(_sources(yaml.safe_load(path.read_text())))
    assert found, f"{path.name} has no sources"
    long = [(k, len(t)) for k, t in found if len(t) > 500]
    history = [k for k, t in found if HISTORY.search(t)]
    assert not long, f"{path.name}: sources over 500 characters: {long}"
    assert not history, f"{path.name}: sources narrating earlier values: {history}"


def test_history_detector_catches_narration():
    assert HISTORY.search("fit 0.68; was 0.62 before the TP change")
    assert not HISTORY.search("fit to the 17 training cases (objective 0.00030)")


def test_calibration_log_keeps_the_history():
    log = (Path(__file__).resolve().parents[1] / "docs" / "calibration-log.md").read_text()
    assert "## dgx-h100: gpu.gemm_efficiency" in log and "was 0.62" in log
