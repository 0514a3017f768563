"""The committed gallery matches its generator; the generator writes figures and README."""

from __future__ import annotations

import re
from pathlib import Path

from simulator.studies.gallery import GALLERY, Entry, _breakdown, _timeline, build_gallery

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
MAX_BYTES = 300_000


def test_committed_gallery_is_complete_and_small():
    readme = (REPORTS / "README.md").read_text()
    shown = re.findall(r"!\[[^]]*\]\(figures/([^)]+)\)", readme)
    assert shown == [e.name for e in GALLERY]
    for name in shown:
        size = (REPORTS / "figures" / name).stat().st_size
        assert 10_000 < size < MAX_BYTES, (name, size)
    assert "python -m simulator.studies.gallery" in readme


def test_build_gallery_writes_figures_and_readme(tmp_path):
    entries = [
        Entry("b.png", "B", "two plans", _breakdown(
            [("tiny", "dgx-h100", {}, "1F1B"),
             ("tiny", "dgx-h100", {"parallelism.pipeline_schedule": "gpipe"}, "GPipe")],
            "tiny")),
        Entry("t.png", "T", "a timeline", _timeline("tiny", "dgx-h100", {})),
    ]
    paths = build_gallery(tmp_path, entries)
    assert [p.name for p in paths] == ["b.png", "t.png", "README.md"]
    readme = (tmp_path / "README.md").read_text()
    assert "![B](figures/b.png)" in readme and "![T](figures/t.png)" in readme
    assert "## B\n\ntwo plans" in readme
    rows = [line for line in readme.splitlines() if line.startswith("| tiny-gpt")]
    assert len(rows) == 3 and "1F1B" in rows[0] and "GPipe" in rows[1]
    assert all((tmp_path / "figures" / n).stat().st_size > 10_000 for n in ("b.png", "t.png"))
