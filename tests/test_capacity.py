"""`clustersim capacity` / `simulator.capacity`: rows, cost, frontier, limits, reproduction.

The small `tiny` workload keeps each grid to seconds; the judged llama3-70b grid is the
same code path (benchmarks/bench_capacity.py times a larger one).
"""

from __future__ import annotations

import json
import os
import shlex

import pytest

import simulator
from simulator.capacity import capacity
from simulator.capacity.frontier import dominates
from simulator.capacity.scaling import parameters
from simulator.cli.main import main
from simulator.config import load_workload
from simulator.errors import ConfigError
from simulator.sweep.executors import Executor

TOPOS = ["dgx-h100", "gb200-nvl72"]
GPUS = [8, 16, 64]
PRICES = {"dgx-h100": 2.5, "gb200-nvl72": 4.0}


@pytest.fixture(scope="module")
def table():
    return capacity("tiny", 1e9, TOPOS, GPUS, prices=PRICES, executor="serial", mc_runs=20)


def test_one_row_per_cell_in_grid_order(table):
    assert list(zip(table.topology, table.num_gpus, strict=True)) == [
        (t, g) for t in TOPOS for g in GPUS]
    assert (table.status == "ok").all()


def test_cost_is_gpu_hours_times_price_exactly(table):
    for r in table.to_dict("records"):
        assert r["cost_usd"] == r["gpu_hours"] * PRICES[r["topology"]]
        assert r["total_cost_usd"] == r["cost_usd"]  # no fabric prices given


def test_frontier_is_exactly_the_non_dominated_rows(table):
    assert table.attrs["frontier_axes"] == ["days", "total_cost_usd"]
    pts = list(zip(table.days, table.total_cost_usd, strict=True))
    expect = [not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in pts) for p in pts]
    assert list(table.on_frontier) == expect
    assert any(expect) and not all(expect)  # the grid has a real trade-off


def test_dominates_is_strict_in_one_axis():
    assert dominates((1, 1), (1, 2)) and not dominates((1, 1), (1, 1))
    assert not dominates((1, 3), (2, 2))


def test_each_row_reproduces_through_clustersim_run(table, tmp_path, capsys):
    for i, r in enumerate(table.to_dict("records")):
        out = tmp_path / f"r{i}.json"
        argv = ["run", "tiny", "-t", r["topology"], *shlex.split(r["set_flags"]), "-o",
                str(out)]
        assert main(argv) == 0
        step = json.loads(out.read_text())["step_time_s"]
        assert step == pytest.approx(r["step_time_s"], rel=1e-12)
        assert r["step_time_low_s"] <= r["step_time_s"] <= r["step_time_high_s"]
        assert r["days_p10"] <= r["days_p90"]


def test_overrides_dict_matches_the_flags(table):
    r = table.iloc[0]
    again = simulator.simulate("tiny", r.topology, r.overrides)
    assert again.step_time_s == pytest.approx(r.step_time_s, rel=1e-12)


def test_without_prices_cost_is_omitted_and_frontier_uses_gpu_hours():
    df = capacity("tiny", 1e9, ["dgx-h100"], [8, 16], executor="serial", mc_runs=10)
    assert df.cost_usd.isna().all() and df.attrs["frontier_axes"] == ["days", "gpu_hours"]


def test_cell_without_a_plan_is_kept_and_marked():
    df = capacity("tiny", 1e9, ["dgx-h100"], [8, 65536], prices={"dgx-h100": 1.0},
                  executor="serial", mc_runs=10)
    bad = df[df.num_gpus == 65536].iloc[0]
    assert bad.status == "no_plan" and "--gpus" in bad.reason and not bad.on_frontier
    assert df[df.num_gpus == 8].iloc[0].on_frontier


def test_unmet_deadline_is_one_line_and_exit_0(tmp_path, capsys):
    out = tmp_path / "c.json"
    code = main(["capacity", "tiny", "--tokens", "1e9", "-t", "dgx-h100", "--gpus", "8,16",
                 "--price", "dgx-h100=2", "--deadline-days", "1e-9", "--budget", "1e-6",
                 "--executor", "serial", "--runs", "10", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 0
    lines = [x for x in err.splitlines() if "no row meets" in x]
    assert len(lines) == 1 and "the deadline and the budget" in lines[0]
    rows = json.loads(out.read_text())
    assert len(rows) == 2
    assert all(r["meets_deadline"] is False and r["within_budget"] is False for r in rows)


@pytest.mark.parametrize("argv, field", [
    (["--budget", "100"], "--budget"),  # a budget cannot be checked without prices
    (["--price", "dgx-b200=2"], "--price"),  # not one of --topology
    (["--price", "dgx-h100=-1"], "--price"),
    (["--format", "csv", "-o", "x.json"], "-o"),  # extension disagrees with the format
    (["--tokens", "0"], "--tokens"),
])
def test_bad_input_is_one_line_exit_2(argv, field, capsys):
    base = ["capacity", "tiny", "-t", "dgx-h100", "--gpus", "8", "--executor", "serial"]
    if "--tokens" not in argv:
        base += ["--tokens", "1e9"]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]


def test_csv_format_from_the_extension(tmp_path):
    out = tmp_path / "c.csv"
    assert main(["capacity", "tiny", "--tokens", "1e9", "-t", "dgx-h100", "--gpus", "8",
                 "--executor", "serial", "--runs", "5", "-o", str(out)]) == 0
    head, row = out.read_text().splitlines()[:2]
    assert head.startswith("tokens,topology,num_gpus") and "on_frontier" in head
    assert "parallelism.tensor" in row


class _Refuses(Executor):
    def map(self, fn, items):
        raise AssertionError("a stored cell was computed again")


def test_store_resumes_without_recomputing(tmp_path):
    first = capacity("tiny", 1e9, ["dgx-h100"], [8, 16], executor="serial",
                     store=tmp_path, mc_runs=10)
    again = capacity("tiny", 1e9, ["dgx-h100"], [8, 16], executor=_Refuses(),
                     store=tmp_path, mc_runs=10)
    assert first.drop(columns="overrides").equals(again.drop(columns="overrides"))
    assert list(first.overrides) == list(again.overrides)


def test_public_api_is_lazy_and_listed():
    assert "capacity" in simulator.__all__ and simulator.capacity is capacity


def test_parameters_match_the_published_sizes():
    assert parameters(load_workload("llama3-8b")) == pytest.approx(8.03e9, rel=0.01)
    assert parameters(load_workload("llama3-70b")) == pytest.approx(70.6e9, rel=0.01)
    with pytest.raises(ConfigError):
        parameters(load_workload("mixtral-8x7b"))


def test_model_sizes_axis_uses_compute_optimal_tokens():
    df = capacity("unused", None, ["dgx-h100"], [8], model_sizes=["tiny"],
                  executor="serial", mc_runs=5)
    n = parameters(load_workload("tiny"))
    assert df.model.tolist() == ["tiny"] and df.tokens.iloc[0] == pytest.approx(20 * n)


def test_figure_draws_frontier_deadline_and_budget(table, tmp_path):
    from simulator.report.capacity_plot import capacity_figure, frontier_table

    fig = capacity_figure(table, deadline_days=0.01, budget_usd=1.0)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == TOPOS and {"frontier", "deadline", "budget"} <= set(labels)
    front = table[table.on_frontier]
    assert len(frontier_table(table)) == 2 + len(front)


def test_cli_plot_writes_a_png(tmp_path, capsys):
    png = tmp_path / "c.png"
    assert main(["capacity", "tiny", "--tokens", "1e9", "-t", "dgx-h100", "--gpus", "8,16",
                 "--executor", "serial", "--runs", "5", "--plot", str(png)]) == 0
    assert png.stat().st_size > 10_000


@pytest.mark.skipif(not os.environ.get("CLUSTERSIM_SLOW"),
                    reason="the issue's llama3-70b grid (~1 min): set CLUSTERSIM_SLOW=1")
def test_issue_grid_llama3_70b(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["capacity", "llama3-70b", "--tokens", "2e12", "--topology",
                 "dgx-h100,gb200-nvl72", "--gpus", "256,1024,4096", "--price",
                 "dgx-h100=2.5,gb200-nvl72=4.0", "--format", "json", "-o", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)
    prices = {"dgx-h100": 2.5, "gb200-nvl72": 4.0}
    assert all(r["cost_usd"] == r["gpu_hours"] * prices[r["topology"]] for r in rows)
    pts = [(r["days"], r["cost_usd"]) for r in rows]
    assert [r["on_frontier"] for r in rows] == [
        not any(dominates(q, p) for q in pts) for p in pts]
    for i, r in enumerate(rows):
        res = tmp_path / f"r{i}.json"
        assert main(["run", "llama3-70b", "-t", r["topology"], *shlex.split(r["set_flags"]),
                     "-o", str(res)]) == 0
        assert json.loads(res.read_text())["step_time_s"] == pytest.approx(
            r["step_time_s"], rel=1e-12)


def test_model_sizes_have_their_own_frontier_and_the_largest_is_named():
    df = capacity("unused", None, ["dgx-h100"], [8, 16], model_sizes=["tiny", "llama3-8b"],
                  prices={"dgx-h100": 2.0}, deadline_days=1e6, budget_usd=1e12,
                  executor="serial", mc_runs=5)
    for _, rows in df.groupby("model"):
        pts = list(zip(rows.days, rows.total_cost_usd, strict=True))
        assert list(rows.on_frontier) == [not any(dominates(q, p) for q in pts) for p in pts]
    assert df.groupby("model").on_frontier.any().all()
    assert "largest model that meets the deadline and the budget: llama3-8b" in \
        df.attrs["summary"]


def test_base_overrides_travel_with_the_plan(tmp_path):
    out = tmp_path / "c.json"
    assert main(["capacity", "tiny", "--tokens", "1e9", "-t", "dgx-h100", "--gpus", "8",
                 "--set", "training.global_batch_size=16", "--executor", "serial",
                 "--runs", "5", "-o", str(out)]) == 0
    row = json.loads(out.read_text())[0]
    assert row["overrides"]["training.global_batch_size"] == 16
    assert "--set training.global_batch_size=16" in row["set_flags"]


@pytest.mark.parametrize("bad", ["8,,16", "8,", [8.5], [True], "x", "", [], "0", "-8"])
def test_gpu_counts_are_whole_numbers_in_single_commas(bad):
    from simulator.capacity import _counts

    with pytest.raises(ConfigError, match="--gpus"):
        _counts(bad)


def test_gpu_counts_accept_lists_strings_and_numpy_ints():
    import numpy as np

    from simulator.capacity import _counts

    assert _counts("8, 16") == _counts([8, 16, 8]) == _counts(np.array([8, 16])) == [8, 16]


@pytest.mark.parametrize("field,kw", [("--deadline-days", {"deadline_days": "x"}),
                                      ("--budget", {"budget_usd": True}),
                                      ("--tokens", {"tokens": "x"})])
def test_non_numbers_from_the_python_api_are_config_errors(field, kw):
    """A string or a bool where a number belongs is named, not a TypeError (fuzz finding)."""
    args = {"tokens": 1e9, **kw}
    with pytest.raises(ConfigError, match=field):
        capacity("tiny", args.pop("tokens"), ["dgx-h100"], [8], executor="serial", **args)
