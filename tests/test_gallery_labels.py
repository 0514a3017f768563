"""Gallery labels name the plan that was simulated, and say when it does not fit."""

from __future__ import annotations

from simulator import simulate
from simulator.report.breakdown import breakdown_frame
from simulator.report.figures import close
from simulator.studies.gallery import GALLERY


def test_405b_breakdown_labels_follow_the_simulated_schedule():
    entry = next(e for e in GALLERY if e.name.startswith("breakdown-llama3-405b"))
    log: list = []
    close(entry.build(log))
    for run in log:
        p = run.result.plan
        assert p["schedule"] in run.label and "{plan}" not in run.label
        assert ("1f1b" in run.label) == (p["schedule"] == "1f1b")
    assert any(r.result.plan["schedule"] == "interleaved" for r in log)


def test_a_plan_that_does_not_fit_is_noted_on_its_bar():
    fits = simulate("tiny", "dgx-h100")
    over = simulate("tiny", "dgx-h100", topology_overrides={"gpu.hbm_GB": 1.0,
                                                           "gpu.hbm_usable_MiB": None})
    assert fits.fits_in_memory and not over.fits_in_memory
    labels = breakdown_frame([fits, over], ["a", "b"])["label"].tolist()
    assert labels == ["a", "b\n(does not fit)"]
