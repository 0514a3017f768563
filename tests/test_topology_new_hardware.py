"""H200, MI300X and MI355X: datasheet constants, the uncalibrated note and the wider interval.

The constants themselves are sourced in topologies/{h200,mi300x,mi355x}.yaml (checked by
tests/test_topology_sources.py); here: H200 is DGX H100 with HBM3e, the AMD parts carry their
datasheet peaks, and a prediction on an uncalibrated topology says so and widens its interval
by the topology's ``calibration.interval_scale`` (simulator/metrics/calibration.py).
"""

from __future__ import annotations

import math

import pytest

from simulator import simulate
from simulator.cli.main import main as cli
from simulator.config import load_topology
from simulator.metrics.calibration import widen


def test_h200_is_dgx_h100_with_hbm3e():
    h100, h200 = load_topology("dgx-h100"), load_topology("h200")
    assert (h200.gpu.hbm_GB, h200.gpu.hbm_bandwidth_TBps) == (141, 4.8)
    assert h200.gpu.peak_tflops == h100.gpu.peak_tflops
    strip = [t.model_copy(update={'sources': {}}) for t in h100.tiers]
    assert [t.model_copy(update={'sources': {}}) for t in h200.tiers] == strip
    assert h200.calibration.status == "uncalibrated"
    assert h100.calibration.status == "validated"


@pytest.mark.parametrize(("name", "bf16", "hbm", "tb_s", "link"),
                         [("mi300x", 1307.4, 192, 5.3, 64), ("mi355x", 2516.6, 288, 8.0, 76.8)])
def test_amd_datasheet_constants(name, bf16, hbm, tb_s, link):
    t = load_topology(name)
    assert t.gpu.peak_tflops.bf16 == bf16
    assert t.gpu.peak_tflops.fp8 == pytest.approx(2 * bf16, rel=1e-3)
    assert (t.gpu.hbm_GB, t.gpu.hbm_bandwidth_TBps) == (hbm, tb_s)
    mesh = t.tiers[0]
    assert mesh.size == 8 and mesh.bandwidth_GBps == pytest.approx(7 * link)  # 7 links
    assert t.calibration.status == "uncalibrated" and t.calibration.interval_scale > 1


def test_uncalibrated_interval_is_wider_by_the_scale():
    r = simulate("llama3-8b", "h200")
    base = simulate("llama3-8b", "h200", topology_overrides={"calibration.interval_scale": 1.0})
    assert r.step_time_s == base.step_time_s
    lo, hi = r.step_time_interval_s["low"], r.step_time_interval_s["high"]
    blo, bhi = base.step_time_interval_s["low"], base.step_time_interval_s["high"]
    assert lo < blo and hi > bhi
    assert math.log(hi / r.step_time_s) == pytest.approx(1.5 * math.log(bhi / r.step_time_s))
    assert any("uncalibrated" in n for n in r.notes)
    assert not any("uncalibrated" in n for n in simulate("llama3-8b", "dgx-h100").notes)


def test_widen_keeps_missing_intervals_missing():
    assert widen(2.0, None, None, 2.0) == (None, None)
    assert widen(2.0, 1.0, 4.0, 2.0) == pytest.approx((0.5, 8.0))


@pytest.mark.parametrize("name", ["h200", "mi300x"])
def test_run_prints_the_uncalibrated_note(name, capsys):
    assert cli(["run", "llama3-70b", "-t", name]) == 0
    out = capsys.readouterr()
    assert "uncalibrated" in out.err and "step time" in out.out
