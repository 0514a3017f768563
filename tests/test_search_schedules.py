"""Plan search over pipeline schedules: the option, the default, the superset, the bound.

``--schedules`` / ``schedules=`` adds the zero-bubble and DualPipe schedules to
the search; each schedule's own ``check`` decides which plans it can run, and
the branch-and-bound relies on :func:`step_lower_bound` staying below the
simulated step for every schedule it meets.
"""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.api import resolve
from simulator.cli.main import main
from simulator.engine import run_engine
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.schedules import SCHEDULES
from simulator.shape.validate import check_plan
from simulator.sweep import search
from simulator.sweep.candidates import DEFAULT_SCHEDULES, schedule_names, shapes
from simulator.sweep.search_tasks import step_lower_bound
from simulator.workload.plan import build_plan

# tiny with 8 layers (so four stages hold two V chunks each) on 8 GPUs
EIGHT_LAYERS = {"model.num_layers": 8, "training.global_batch_size": 16}


@pytest.fixture(scope="module")
def both():
    kw = dict(executor="serial", micro_batch_sizes=(1, 2), overrides=EIGHT_LAYERS, top=5)
    return search("tiny", "dgx-h100", 8, **kw), search("tiny", "dgx-h100", 8, schedules="all",
                                                       **kw)


def test_schedule_names_parse_and_reject():
    assert schedule_names(None) == DEFAULT_SCHEDULES == ("1f1b", "interleaved")
    assert schedule_names("all") == tuple(sorted(SCHEDULES))
    assert schedule_names(" zb_h1, dualpipe,zb_h1") == ("zb_h1", "dualpipe")
    assert schedule_names(["zb_v"]) == ("zb_v",)
    for bad in ("zb-h1", "", "all,zb_h1", ["1f1b", "pipedream"]):
        with pytest.raises(ConfigError) as err:
            schedule_names(bad)
        assert err.value.field == "--schedules" and "dualpipe_v" in err.value.message()


def test_cli_bad_schedule_is_one_line_exit_2(capsys):
    assert main(["search", "tiny", "--topology", "dgx-h100", "--gpus", "4",
                 "--schedules", "zb_h1,zbv"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--schedules" in err and "zb_h1,zbv" in err
    assert "zb_v" in err and "Traceback" not in err


def test_default_shapes_are_megatrons_1f1b_and_interleaved():
    w, t = resolve("llama3-8b", "dgx-h100")
    found = shapes(w, t, 64, (1, 2))
    assert found == shapes(w, t, 64, (1, 2), schedules=DEFAULT_SCHEDULES)
    assert all(s.schedule == ("interleaved" if s.vp > 1 else "1f1b") for s in found)
    wide = shapes(w, t, 64, (1, 2), schedules=schedule_names("all"))
    assert set(found) < set(wide)
    assert {s.schedule for s in wide if s.pp == 1} == {"1f1b"}  # no pipeline, no schedule
    assert {s.schedule for s in wide if s.vp > 1} == {"interleaved"}


def test_default_search_unchanged_and_all_is_a_superset(both):
    default, wide = both
    assert default.schedules == DEFAULT_SCHEDULES and set(default.plans.schedule) <= {
        "1f1b", "interleaved"}
    # the default ranks what it ranked before schedules were an option: 1F1B, or
    # interleaved exactly when VP > 1, at the same speeds as simulating the plan directly
    assert (default.plans.schedule == default.plans.vp.map(
        lambda v: "interleaved" if v > 1 else "1f1b")).all()
    named = search("tiny", "dgx-h100", 8, executor="serial", micro_batch_sizes=(1, 2),
                   overrides=EIGHT_LAYERS, top=5, schedules=["interleaved", "1f1b"])
    same = ["plan", "schedule", "recompute", "tokens_per_s", "bound_s"]
    assert named.plans[same].equals(default.plans[same]) and named.counts == default.counts
    assert wide.counts["plans"] > default.counts["plans"]
    assert wide.plans.tokens_per_s[0] >= default.plans.tokens_per_s[0]
    c = wide.counts
    assert c["plans"] == sum(c[k] for k in ("invalid", "over_memory", "recompute_dominated",
                                            "pruned_by_bound", "not_simulated_cap",
                                            "simulated"))
    assert (wide.plans.bound_s <= wide.plans.step_time_s * (1 + 1e-12)).all()
    assert wide.plans.tokens_per_s.is_monotonic_decreasing


def test_schedule_plans_reproduce_with_simulate(both):
    _, wide = both
    rows = wide.plans[wide.plans.schedule != "1f1b"]
    assert not rows.empty
    rank = int(rows["rank"].iloc[0])
    over = wide.overrides_for(rank)
    assert over["parallelism.pipeline_schedule"] == rows["schedule"].iloc[0]
    step = simulate("tiny", "dgx-h100", overrides=over).step_time_s  # the expected step
    assert step == pytest.approx(float(rows["step_time_s"].iloc[0]), rel=1e-9)
    w, t = resolve("tiny", "dgx-h100", over)
    ideal = run_engine(build_plan(w, Topology.from_config(t)).engine_input).step_time
    assert ideal == pytest.approx(float(rows["step_time_ideal_s"].iloc[0]), rel=1e-9)


def test_cli_table_and_csv_show_the_schedule(capsys):
    args = ["search", "tiny", "--topology", "dgx-h100", "--gpus", "4", "--top", "5",
            "--workers", "1", "--micro-batch-sizes", "1", "--schedules", "zb_h1,1f1b"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "schedule" in out.splitlines()[3] and "zb_h1" in out
    assert main([*args, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].count("schedule") == 1


def _grid():
    for name in sorted(SCHEDULES):
        for p in (1, 2, 4):
            for m in (4, 8):
                yield name, p, m


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_step_lower_bound_holds_for_every_schedule(name):
    """bound <= simulated step on small plans (1e-12: summation order), exact on one stage."""
    checked = 0
    for _, p, m in (g for g in _grid() if g[0] == name):
        over = {"model.num_layers": 8, "parallelism.tensor": 1, "parallelism.pipeline": p,
                "parallelism.data": 1, "parallelism.sequence_parallel": False,
                "parallelism.virtual_pipeline": 2 if SCHEDULES[name].virtual else None,
                "parallelism.pipeline_schedule": name, "training.global_batch_size": m,
                "training.micro_batch_size": 1}
        try:
            w, t = resolve("tiny", "dgx-h100", over)
            check_plan(w, t)
        except ConfigError:
            continue  # the schedule's own rules (DualPipe's even p, m >= 2p, ...)
        inp = build_plan(w, Topology.from_config(t)).engine_input
        bound, step = step_lower_bound(inp), run_engine(inp).step_time
        assert bound <= step * (1 + 1e-12), (p, m)
        if p == 1:
            assert bound == pytest.approx(step, rel=1e-12)
        else:
            assert bound > 0.85 * step  # tight enough to prune
        checked += 1
    assert checked >= 3


def test_step_lower_bound_holds_with_moe_fused_pairs():
    """MoE: DualPipe's F&B pairs hide EP all-to-all; the bound subtracts at most all of it."""
    for name in sorted(SCHEDULES):
        over = {"model.num_layers": 8, "model.seq_length": 1024, "parallelism.tensor": 1,
                "parallelism.pipeline": 2, "parallelism.data": 4, "parallelism.expert": 2,
                "parallelism.virtual_pipeline": 2 if SCHEDULES[name].virtual else None,
                "parallelism.pipeline_schedule": name, "parallelism.sequence_parallel": False,
                "training.global_batch_size": 16, "training.micro_batch_size": 1}
        w, t = resolve("mixtral-8x7b", "dgx-h100", over)
        check_plan(w, t)
        inp = build_plan(w, Topology.from_config(t)).engine_input
        bound, step = step_lower_bound(inp), run_engine(inp).step_time
        assert 0.7 * step < bound <= step * (1 + 1e-12), name
