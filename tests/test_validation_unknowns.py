"""A case's stated recipe unknowns (`plausible:`): predicted as context for its error,
never used to choose (simulator/validation/unknowns.py)."""

from __future__ import annotations

import pytest

from simulator.validation.cases import load_cases
from simulator.validation.report import render_markdown, run_cases
from simulator.validation.unknowns import spread


@pytest.fixture(scope="module")
def moe_rows():
    return [c for c in load_cases() if c.group in ("mbridge-qwen3-30b-a3b-h100-fp8",
                                                  "mbridge-gpt-oss-120b-h100-bf16")]


def test_a_row_lists_its_alternative_plan_and_its_siblings_do_not(moe_rows):
    alts = {c.id: c.spec["plausible"] for c in moe_rows}
    # the 25.11 table rows state one plan; their recipe presets at the same release another
    assert alts["moe-mbridge2511-qwen3-30b-h100-16g-fp8"] == [
        {"training.micro_batch_size": 1, "parallelism.virtual_pipeline": 12}]
    assert alts["moe-mbridge2511-gpt-oss-120b-h100-64g-bf16"] == [
        {"training.micro_batch_size": 1}]
    assert alts["moe-mbridge2602-qwen3-30b-h100-16g-fp8"] == []


def test_the_report_shows_the_range_and_keeps_the_stated_error(moe_rows):
    rows = run_cases(moe_rows)
    text = render_markdown(rows)
    assert "## What the stated unknowns allow" in text
    qwen = next(r for r in rows if r.case.id == "moe-mbridge2511-qwen3-30b-h100-16g-fp8")
    s = spread(qwen.case, qwen.predicted)
    assert s["low"] <= qwen.error <= s["high"]
    # the preset's plan (MBS 1, VP 12) is the slower one per sample: more micro-batches
    # launch more kernels from the host, which the MBS 2 row halves per sample
    assert s["plausible"]["micro_batch_size 1, virtual_pipeline 12"] > qwen.error
    assert f"{100 * qwen.error:+.1f} % | micro_batch_size 1, virtual_pipeline 12" in text
    # the summary line is the stated assumption's error, not the range's best
    assert f"| {qwen.case.id} | dgx-h100 |" in text and f"{qwen.error:+.1%}" in text
