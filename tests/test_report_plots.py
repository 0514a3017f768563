"""Plot functions on real simulation output: what they draw adds up, and they save sanely."""

from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb

from simulator.config import load_workload
from simulator.errors import ConfigError
from simulator.memory import estimate_memory
from simulator.report import (
    breakdown_figure,
    expert_load_figure,
    expert_load_figure_for,
    frame_from_table,
    memory_figure,
    memory_figure_for,
    save_figure,
    scaling_figure,
    simulate_run,
    timeline_figure,
)
from simulator.report.figures import COLORS
from simulator.report.timeline import LANE

PIPE2 = {"parallelism.pipeline": 2, "training.global_batch_size": 8}


@pytest.fixture(scope="module")
def runs():
    """Three small configurations: two schedules and two topologies."""
    return [simulate_run("tiny", "dgx-h100"),
            simulate_run("tiny", "gb200-nvl72"),
            simulate_run("tiny", "dgx-h100", {"parallelism.pipeline_schedule": "gpipe"})]


def unit_scale(label: str) -> float:
    unit = re.search(r"\((m?s)\)", label).group(1)
    return {"s": 1.0, "ms": 1e3}[unit]


def bar_totals(ax) -> dict[float, float]:
    """Sum of stacked bar heights at each x position."""
    tot: dict[float, float] = defaultdict(float)
    for p in ax.patches:
        tot[round(p.get_x() + p.get_width() / 2, 6)] += p.get_height()
    return dict(sorted(tot.items()))


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def check_saved(fig, tmp_path, name: str) -> None:
    png = save_figure(fig, tmp_path / f"{name}.png")
    w, h = png_size(png)
    assert 300 <= w <= 2500 and 200 <= h <= 2000
    assert 5_000 < png.stat().st_size < 300_000
    svg = save_figure(fig, tmp_path / f"{name}.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(list(root.iter())) > 50
    assert sorted(p.name for p in tmp_path.iterdir() if p.stem == name) == \
        [f"{name}.png", f"{name}.svg"]  # no temporary files left behind


def test_breakdown_bars_sum_to_step_time(runs, tmp_path):
    fig = breakdown_figure([r.result for r in runs])
    ax = fig.axes[0]
    scale = unit_scale(ax.get_ylabel())
    totals = list(bar_totals(ax).values())
    assert len(totals) == 3
    for total, run in zip(totals, runs, strict=True):
        assert sum(run.result.breakdown_s.values()) == pytest.approx(run.result.step_time_s)
        assert total == pytest.approx(run.result.step_time_s * scale, rel=1e-9)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert "dgx-h100" in labels[0] and "gb200-nvl72" in labels[1] and "gpipe" in labels[2]
    assert "tiny-gpt" in ax.get_title()
    check_saved(fig, tmp_path, "breakdown")


def test_breakdown_from_a_sweep_table(runs, tmp_path):
    csv = tmp_path / "sweep.csv"
    pd.DataFrame([r.result.to_series() for r in runs]).to_csv(csv, index=False)
    df = frame_from_table(pd.read_csv(csv))
    fig = breakdown_figure(df)
    ax = fig.axes[0]
    scale = unit_scale(ax.get_ylabel())
    want = [r.result.step_time_s * scale for r in runs]
    assert list(bar_totals(ax).values()) == pytest.approx(want, rel=1e-9)
    assert len(set(df["label"])) == 3  # labels built from the columns that differ
    with pytest.raises(ConfigError):
        frame_from_table(pd.DataFrame({"a": [1]}))


def test_timeline_compute_lane_adds_up_to_busy_time(tmp_path):
    run = simulate_run("tiny", "dgx-h100", {**PIPE2, "training.recompute": "selective"})
    fig = timeline_figure(run.plan, run.engine, run.result)
    ax = fig.axes[0]
    scale = unit_scale(ax.get_xlabel())
    off, h = LANE["compute"]
    busy: dict[int, float] = defaultdict(float)
    hatched = 0
    for coll in ax.collections:
        if not isinstance(coll, PolyCollection):
            continue
        fc = coll.get_facecolor()
        if fc.size == 0 or fc[0][3] == 0:  # the hatched recompute overlay
            hatched += len(coll.get_paths())
            continue
        if tuple(fc[0][:3]) == pytest.approx(to_rgb(COLORS["optimizer"])):
            continue
        for path in coll.get_paths():
            (x0, y0), (x1, y1) = path.vertices.min(axis=0), path.vertices.max(axis=0)
            if y1 - y0 == pytest.approx(h):
                busy[round(y0 - off)] += x1 - x0
    assert sorted(busy) == [0, 1]
    for s, st in enumerate(run.engine.stages):
        assert busy[s] == pytest.approx(st.busy * scale, rel=1e-9)
    m = run.result.plan["microbatches"]
    assert hatched == 2 * m  # every backward shows its recompute share
    assert "tiny-gpt on dgx-h100" in ax.get_title() and "TP2 PP2 DP1" in ax.get_title()
    check_saved(fig, tmp_path, "timeline")


def test_timeline_interleaved_shades_chunks():
    run = simulate_run("tiny", "dgx-h100", {"parallelism.pipeline_schedule": "interleaved",
                                            "parallelism.virtual_pipeline": 2})
    ax = timeline_figure(run.plan, run.engine, run.result).axes[0]
    colors = {tuple(np.round(c.get_facecolor()[0][:3], 4)) for c in ax.collections
              if c.get_facecolor().size and c.get_facecolor()[0][3] > 0}
    # forward and backward, two chunks each, plus optimizer and PP sends (no DP at DP1)
    assert len(colors) == 2 * 2 + 2
    labels = sorted(int(t.get_text()) for t in ax.texts)
    assert set(labels) <= set(range(1, 5))  # micro-batches numbered from 1


def test_timeline_needs_records():
    run = simulate_run("tiny", "dgx-h100")
    run.engine.records = []
    with pytest.raises(ValueError, match="keep_records"):
        timeline_figure(run.plan, run.engine)


def test_memory_bars_are_the_stage_totals(runs, tmp_path):
    plan = runs[0].plan
    report = estimate_memory(plan.workload, plan.topo, plan.partition)
    fig = memory_figure(report, "tiny")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "memory per GPU (GB)"
    want = [st.total / 1e9 for st in report.stages]
    assert list(bar_totals(ax).values()) == pytest.approx(want, rel=1e-9)
    cap = [line.get_ydata()[0] for line in ax.lines]
    assert cap == pytest.approx([report.capacity_bytes / 1e9])
    title = memory_figure_for(runs[0]).axes[0].get_title()
    assert "tiny-gpt on dgx-h100" in title and "TP2 PP2" in title
    check_saved(fig, tmp_path, "memory")


def test_scaling_lines_follow_the_table(tmp_path):
    rows = []
    for topo in ("dgx-h100", "gb200-nvl72"):
        for dp in (1, 2, 4):
            r = simulate_run("tiny", topo, {"parallelism.data": dp,
                                            "training.global_batch_size": 16}).result
            rows.append({"label": topo, "num_gpus": r.num_gpus,
                         "tokens_per_s": r.tokens_per_s, "mfu": r.mfu})
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=1)  # order must not matter
    fig = scaling_figure(df)
    tput, mfu = fig.axes[:2]
    assert tput.get_ylabel() == "throughput (tokens/s)" and "%" in mfu.get_ylabel()
    assert [line.get_label() for line in tput.lines] == list(dict.fromkeys(df["label"]))
    for line in tput.lines:
        want = df[df["label"] == line.get_label()].sort_values("num_gpus")
        assert list(line.get_xdata()) == [4, 8, 16]
        assert list(line.get_ydata()) == pytest.approx(want["tokens_per_s"].tolist())
    for line in mfu.lines:
        want = df[df["label"] == line.get_label()].sort_values("num_gpus")
        assert list(line.get_ydata()) == pytest.approx((want["mfu"] * 100).tolist())
    with pytest.raises(ConfigError, match="seq_length"):
        scaling_figure(df, x="seq_length")
    check_saved(fig, tmp_path, "scaling")


def test_expert_load_from_arrays(tmp_path):
    counts = np.array([6, 3, 6, 14, 16, 19, 25, 39])  # capacity's worked example: cap 20
    fig = expert_load_figure(counts, ep=4, capacity=20)
    left, right = fig.axes
    heights = [p.get_height() for p in left.patches]
    kept, dropped = heights[:8], heights[8:]
    assert kept == [6, 3, 6, 14, 16, 19, 20, 20]
    assert sum(dropped) == 5 + 19
    assert [p.get_height() for p in right.patches] == [9, 20, 35, 40]
    assert [line.get_ydata()[0] for line in left.lines] == [16, 20]  # even share, capacity
    with pytest.raises(ConfigError):
        expert_load_figure(counts, ep=3)
    check_saved(fig, tmp_path, "experts")


def test_expert_load_for_an_moe_workload():
    w = load_workload("mixtral-8x7b", {"model.moe.router_load": "skewed",
                                       "model.moe.router_skew": 1.0})
    fig = expert_load_figure_for(w)
    left, right = fig.axes
    n = w.model.moe.num_experts
    total = sum(p.get_height() for p in left.patches[:n])
    assert total == pytest.approx(sum(p.get_height() for p in right.patches))
    assert len(right.patches) == w.parallelism.expert
    assert "mixtral-8x7b" in fig.get_suptitle() and "skewed" in fig.get_suptitle()
    with pytest.raises(ConfigError, match="MoE"):
        expert_load_figure_for(load_workload("tiny"))


def test_save_rejects_unknown_extension(runs, tmp_path):
    fig = breakdown_figure([runs[0].result])
    with pytest.raises(ConfigError, match=r"\.png or \.svg"):
        save_figure(fig, tmp_path / "b.jpg")
    assert list(tmp_path.iterdir()) == []


def test_a_long_interleaved_pipeline_is_drawn_as_two_readable_windows():
    """128 micro-batches x 5 chunks (1,280 phases per stage, issue 33.8): the start and the
    end of the step, each with at most ~MAX_PHASES/2 bars per stage, and the title says so."""
    from simulator.report.timeline import MAX_PHASES

    run = simulate_run("tiny", "dgx-h100", {"model.num_layers": 10, "parallelism.tensor": 1,
                                            "parallelism.pipeline": 2,
                                            "parallelism.virtual_pipeline": 5,
                                            "parallelism.pipeline_schedule": "interleaved",
                                            "training.global_batch_size": 128,
                                            "training.micro_batch_size": 1})
    fig = timeline_figure(run.plan, run.engine, run.result)
    assert len(fig.axes) == 2
    assert "1280 phases per stage" in fig.get_suptitle().replace("\n", " ")
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        shown = [b for c in ax.collections for b in c.get_paths()
                 if b.vertices[:, 0].max() >= lo and b.vertices[:, 0].min() <= hi]
        assert 0 < len(shown) <= 2 * (MAX_PHASES // 2 + 10) * 2  # 2 stages, margin for sends
    plain = simulate_run("tiny", "dgx-h100")
    assert len(timeline_figure(plain.plan, plain.engine).axes) == 1  # short: one window
