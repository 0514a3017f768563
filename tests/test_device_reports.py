"""The committed device-check report is what its generator renders from the committed data.

benchmarks/device/dtensor_lora_host.py runs only on a GPU machine; its JSON output sits in
reports/data/ and reports/dtensor_lora_host.md is rendered from it without PyTorch. A hand
edit of the report, or data changed without regenerating it, fails here.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    path = ROOT / "benchmarks" / "device" / "report_dtensor_lora_host.py"
    spec = importlib.util.spec_from_file_location("report_dtensor_lora_host", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_dtensor_lora_host_report_is_rendered_from_its_data():
    assert (ROOT / "reports" / "dtensor_lora_host.md").read_text() == _generator().render()


def test_the_recipe_plan_row_shows_the_dtensor_slowdown_the_analysis_cites():
    """validation/analysis.md cites these: 234 DTensor ops with adapters, 44 without; the TP 2
    layer 1.11x with the position-id read, the TP 4 Qwen layer about 2x."""
    rows = {(r["shape"], r["variant"], r["seq"]): r for r in _generator().load()}
    pair = ("plain+sync", "dtensor+sync")
    tp2 = {v: rows[("llama70b-tp2", v, 4096)]["ms_per_layer"] for v in pair}
    assert 1.05 < tp2["dtensor+sync"] / tp2["plain+sync"] < 1.2
    qwen = {v: rows[("qwen32b-tp4", v, 4096)]["ms_per_layer"] for v in pair}
    assert 1.8 < qwen["dtensor+sync"] / qwen["plain+sync"] < 2.2
    assert rows[("llama70b-tp2", "dtensor", 4096)]["dtensor_ops_per_layer"] == 234
    assert rows[("llama70b-tp2", "dtensor-nolora", 4096)]["dtensor_ops_per_layer"] == 44
    for f in (ROOT / "reports" / "data").glob("dtensor_lora_host_*.json"):
        assert json.loads(f.read_text())["info"]["gpu"] == "NVIDIA H200"
