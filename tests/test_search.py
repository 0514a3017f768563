"""Plan search: only fitting plans, ranked, exact under pruning, beating naive baselines."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from simulator.api import resolve, simulate_resolved
from simulator.cli.main import main
from simulator.config import load_topology
from simulator.config.loader import read_document
from simulator.engine import run_engine
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.sweep import search
from simulator.sweep.candidates import RECOMPUTE, resolve_shapes, shapes, with_recompute
from simulator.sweep.explain import why
from simulator.sweep.search_tasks import step_lower_bound
from simulator.workload.plan import build_plan


def _accounted(c: dict) -> int:
    return (c["invalid"] + c["over_memory"] + c["recompute_dominated"] + c["pruned_by_bound"]
            + c["not_simulated_cap"] + c["simulated"])


@pytest.fixture(scope="module")
def tiny8():
    return search("tiny", "dgx-h100", 8, top=6, executor="serial", micro_batch_sizes=(1, 2))


def test_tiny_plans_fit_are_ranked_and_beat_baselines(tiny8):
    plans = tiny8.plans
    assert len(plans) == 6 and list(plans["rank"]) == [1, 2, 3, 4, 5, 6]
    assert (plans.memory_per_gpu_GB <= 80).all()
    assert plans.tokens_per_s.is_monotonic_decreasing
    assert (plans.bound_s <= plans.step_time_s).all()
    c = tiny8.counts
    assert tiny8.exhaustive and c["pruned_by_bound"] > 0 and c["invalid"] > 0
    assert c["plans"] == _accounted(c)
    ran = [b for b in tiny8.baselines if b["status"] == "ok"]
    assert {b["name"] for b in ran} == {"pure DP", "pure TP"}
    for b in ran:
        assert plans.tokens_per_s[0] >= b["tokens_per_s"]
    pure_tp = next(b for b in ran if b["name"] == "pure TP")
    assert pure_tp["plan"].startswith("TP8 ") and "pure TP" in pure_tp["why_best_wins"]
    assert all(plans.why[:5].str.contains(r"vs #\d", regex=True))


def test_search_top_matches_brute_force(tiny8):
    """Simulate every plan with every recompute: the pruned search's top is the same.

    A plan is listed once, with its best recompute setting; more recompute is
    never faster (the dominance the search relies on).
    """
    data, _, _ = read_document("tiny", "workloads")
    w, t = resolve("tiny", "dgx-h100")
    valid, _ = resolve_shapes(data, t, shapes(w, t, 8, (1, 2)))
    speeds = []
    for _, wv in valid:
        runs = [simulate_resolved(with_recompute(wv, rc), t)[0] for rc in RECOMPUTE]
        assert runs[0].step_time_s <= runs[1].step_time_s <= runs[2].step_time_s
        fitting = [r.tokens_per_s for r in runs if r.fits_in_memory]
        speeds += fitting[:1]
    best = sorted(speeds, reverse=True)[:6]
    assert list(tiny8.plans.tokens_per_s) == best


def test_memory_pruning_and_unfit_baseline_reported():
    res = search("llama3-8b", "dgx-h100", 16, top=3, executor="serial",
                 topology_overrides={"gpu.hbm_GB": 30, "gpu.hbm_usable_MiB": None},
                 micro_batch_sizes=(1,),
                 max_context=2)
    assert len(res.plans) == 3 and (res.plans.memory_per_gpu_GB <= 30).all()
    assert res.counts["over_memory"] > 0 and res.counts["plans"] == _accounted(res.counts)
    dp = next(b for b in res.baselines if b["name"] == "pure DP")
    assert dp["status"] == "not run" and "does not fit even with full recompute" in dp["reason"]


@pytest.mark.parametrize("over", [
    {"parallelism.tensor": 8, "parallelism.pipeline": 4, "parallelism.data": 2},
    {"parallelism.tensor": 4, "parallelism.pipeline": 8, "parallelism.data": 2,
     "parallelism.virtual_pipeline": None, "parallelism.pipeline_schedule": "1f1b"},
    {"parallelism.tensor": 8, "parallelism.pipeline": 8, "parallelism.data": 1,
     "parallelism.virtual_pipeline": 2, "training.recompute": "full"},
    {"parallelism.tensor": 8, "parallelism.pipeline": 2, "parallelism.data": 4,
     "parallelism.virtual_pipeline": None, "parallelism.pipeline_schedule": "gpipe"},
])
def test_step_lower_bound_is_below_and_close_to_the_simulation(over):
    w, t = resolve("llama3-70b", "dgx-h100", over)
    plan = build_plan(w, Topology.from_config(t))
    bound = step_lower_bound(plan.engine_input)
    step = run_engine(plan.engine_input).step_time
    assert 0.8 * step < bound <= step


def test_cli_search_formats(capsys):
    args = ["search", "tiny", "--topology", "dgx-h100", "--gpus", "4", "--top", "3",
            "--workers", "1", "--micro-batch-sizes", "1,2"]
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["rank"] for p in doc["plans"]] == [1, 2, 3] and doc["gpus"] == 4
    assert main([*args, "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(table.tokens_per_s) == [p["tokens_per_s"] for p in doc["plans"]]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "baselines:" in out and "pure DP" in out and "simulated" in out
    assert main(["search", "tiny", "--topology", "dgx-h100", "--gpus", "100000"]) == 2
    assert "--gpus" in capsys.readouterr().err


def test_why_names_savings_losses_and_recompute():
    def row(tokens, step, rc, **parts):
        base = {f"breakdown_s.{k}": 0.0 for k in ("compute", "tp", "cp", "ep", "pp", "dp",
                                                     "bubble")}
        base.update({f"breakdown_s.{k}": v for k, v in parts.items()})
        return {"tokens_per_s": tokens, "step_time_s": step, "recompute": rc, **base}

    a = row(110.0, 1.0, "none", compute=0.9, tp=0.1)
    b = row(100.0, 1.1, "full", compute=0.9, tp=0.05, bubble=0.15)
    text = why(a, b, "#2")
    assert text.startswith("+10.0% vs #2: 150 ms less pipeline bubble")
    assert "none recompute instead of full" in text
    assert text.endswith("despite 50 ms more exposed TP comm")
    assert why(row(300.0, 1.0, "none"), row(100.0, 3.0, "none", compute=2.0),
               "pure DP").startswith("3.00x pure DP: 2000 ms less compute")


def test_search_rejects_bad_arguments():
    with pytest.raises(ConfigError):
        search("tiny", "dgx-h100", 8, top=0, executor="serial")
    t = load_topology("dgx-h100")
    with pytest.raises(ConfigError):
        search("tiny", t, t.max_gpus * 2, executor="serial")


def test_a_workloads_layout_does_not_narrow_the_search():
    """An explicit pipeline layout is one (pipeline, virtual pipeline)'s: the search gives
    every candidate the simulator's own split, so a workload with a layout (tiny's 4 layers
    on 2 stages, "Et|ttL") is searched as the same workload without it."""
    kwargs = dict(top=6, executor="serial", micro_batch_sizes=(1, 2))
    plain = search("tiny", "dgx-h100", 8, **kwargs)
    laid = search("tiny", "dgx-h100", 8, overrides={
        "parallelism.pipeline_model_parallel_layout": "Ett|ttL"}, **kwargs)
    assert list(laid.plans.plan) == list(plain.plans.plan)
    assert list(laid.plans.tokens_per_s) == list(plain.plans.tokens_per_s)
    assert laid.counts["invalid"] == plain.counts["invalid"]


def test_cli_search_says_a_workloads_layout_is_not_searched(capsys):
    assert main(["search", "tiny", "-t", "dgx-h100", "--gpus", "8", "--top", "2",
                 "--executor", "serial", "--set",
                 "parallelism.pipeline_model_parallel_layout=Ett|ttL"]) == 0
    assert "note: the workload's pipeline layout 'Ett|ttL' is its own plan's" in \
        capsys.readouterr().err


def test_a_workload_no_plan_can_take_is_its_own_error(capsys):
    """Every candidate fails on a field the search does not vary (LoRA on the experts of a
    MoE model): the search says why in one line, exit 2, not "no plan fits in memory"."""
    assert main(["search", "mixtral-8x7b", "-t", "dgx-h100", "--gpus", "16",
                 "--set", "training.peft=lora"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.lora_target_modules" in err[0]
