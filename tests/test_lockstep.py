"""PyTorch's lock-step pipeline runtime (stacks/*.yaml ``pipeline.lockstep``,
simulator/engine/lockstep.py): the slot table, a step worked by hand, the profiles that
state it and the AutoModel runs it applies to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.api import resolve, simulate_resolved
from simulator.config.stacks import load_stack, run_stack
from simulator.engine import EngineInput, ListRecorder, NullRecorder, run_engine
from simulator.schedules import get_schedule
from simulator.validation.cases import load_cases
from simulator.workload.fsdp import once_per_schedule

SCHED = get_schedule("interleaved")


def pytorch_pipeline_order(p: int, m: int, v: int) -> dict[int, list]:
    """``ScheduleInterleaved1F1B.pipeline_order`` of PyTorch 2.8 / 2.9, restated: per rank a
    list of slots, each ``(global stage, "F" | "B", micro-batch)`` or None."""
    per_round = m // max(1, m // p)
    order = {}
    for r in range(p):
        warm = min((v - 1) * per_round + 2 * (p - 1 - r), m * v)
        steady = m * v - warm
        pad = (v * p + 2 * (p - 1 - r)) - (warm + r)
        counts: dict[tuple[str, int], int] = {}
        slots: list = [None] * r
        for k in range(m * v + warm):
            fwd = ((k // per_round) % v) * p + r
            bwd = (v - 1 - ((k - warm) // per_round) % v) * p + r
            acts = []
            if k < warm + steady:
                acts.append(("F", fwd))
            if k >= warm:
                acts.append(("B", bwd))
            out = []
            for phase, stage in acts:
                mb = counts.get((phase, stage), 0)
                counts[(phase, stage)] = mb + 1
                out.append((stage, phase, mb))
            if k < warm:
                slots += out + ([None] * max(0, pad) if k == warm - 1 else [])
            elif k < warm + steady:
                slots += out
            else:
                slots += [None, *out]
        order[r] = slots
    return order


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 4, 3), (4, 4, 2), (4, 8, 4), (8, 8, 4),
                                   (8, 16, 2), (3, 6, 2)])
def test_slots_are_pytorch_interleaved_1f1b(p, m, v):
    steps, slots = SCHED.steps(p, m, v), SCHED.time_steps(p, m, v)
    order = pytorch_pipeline_order(p, m, v)
    for s in range(p):
        ours = {t: (x.chunk * p + s, x.phase, x.mb) for x, t in zip(steps[s], slots[s],
                                                                   strict=True)}
        theirs = {t: a for t, a in enumerate(order[s]) if a is not None}
        assert ours == theirs


def test_no_slots_where_pytorch_groups_micro_batches_otherwise():
    # 16 micro-batches on 4 stages: PyTorch runs rounds of 4, so a group of 8 is not its order
    assert SCHED.grouped(8).time_steps(4, 16, 2) is None
    assert get_schedule("1f1b").time_steps(4, 8, 1) is None


def _input(p, m, v, fwd=1.0, bwd=2.0, p2p=0.0, slow=None, lock=True):
    f, b = np.full((p, v, m), fwd), np.full((p, v, m), bwd)
    if slow is not None:
        f[slow] *= 1.5
        b[slow] *= 1.5
    return EngineInput(schedule=SCHED.steps(p, m, v), fwd=f, bwd=b, p2p=np.full(p, p2p),
                       dp_buckets=[[[] for _ in range(v)] for _ in range(p)],
                       optimizer=np.zeros(p), param_gather=np.zeros(p),
                       route=SCHED.route(p, v),
                       lockstep=SCHED.time_steps(p, m, v) if lock else None)


def test_two_stages_worked_by_hand():
    # Rank 0 holds stages 0 and 2, rank 1 stages 1 and 3; forward 1 s, backward 2 s.
    # Slot 3: rank 0 sends F2(1) to rank 1, so rank 1 waits to t=4 although F2(0), its
    # input for F3(0), arrived at 3; from there the step is the asynchronous one shifted by
    # that second: backwards end 7 (B3(0)), 10, 12, 14, 16.
    run = run_engine(_input(2, 2, 2), ListRecorder())
    assert run.step_time == pytest.approx(16.0)
    assert run_engine(_input(2, 2, 2, lock=False), NullRecorder()).step_time == 15.0
    rank1 = [(r.name, r.chunk, r.mb, r.start) for r in run.records
             if r.stage == 1 and r.stream == "compute"]
    assert rank1[2] == ("F", 1, 0, 4.0)  # F3(0): the slot-3 wait, not its input's arrival


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (4, 8, 2), (8, 8, 4), (4, 4, 3)])
@pytest.mark.parametrize("p2p", [0.0, 0.1])
@pytest.mark.parametrize("slow", [None, (1, 0)])
def test_never_faster_than_the_asynchronous_order(p, m, v, p2p, slow):
    lock = run_engine(_input(p, m, v, p2p=p2p, slow=slow), NullRecorder())
    free = run_engine(_input(p, m, v, p2p=p2p, slow=slow, lock=False), NullRecorder())
    assert lock.step_time >= free.step_time - 1e-12
    # one replay for both recorders: the recorded one gives the same step, statistics and
    # event count as the counting one
    kept = run_engine(_input(p, m, v, p2p=p2p, slow=slow), ListRecorder())
    assert kept.step_time == lock.step_time and kept.stages == lock.stages
    assert kept.events == lock.events == len(kept.records)
    # every slot with a transfer waits for it: the transfers' seconds are exposed
    if p2p:
        assert all(st.pp_wait > 0 for st in lock.stages)


def test_a_faster_link_never_lengthens_the_lockstep():
    slow = [run_engine(_input(4, 8, 2, p2p=x, slow=(2, 1)), NullRecorder()).step_time
            for x in (0.0, 0.05, 0.1, 0.2)]
    assert slow == sorted(slow)


def test_profiles_state_it_by_pytorch_release():
    assert load_stack("nemo-automodel", "AutoModel 2025-10").pipeline_lockstep
    assert load_stack("nemo-automodel", "AutoModel 2026-04").pipeline_lockstep
    assert not load_stack("nemo-automodel").pipeline_lockstep  # torch 2.10 runtime
    assert not load_stack("torchtitan").pipeline_lockstep
    assert load_stack("torchtitan", "torchtitan 2024-11").pipeline_lockstep
    assert load_stack("torchtitan", "torchtitan 2025-06").pipeline_lockstep
    assert not load_stack("megatron").pipeline_lockstep  # Megatron-Core's own schedules
    # the release's other values still apply
    assert load_stack("nemo-automodel", "AutoModel 2026-04").reduce_dtype == "bf16"


def _case(case_id: str):
    folders = [Path("validation/stacks"), Path("validation")]
    return next(c for f in folders for c in load_cases(f) if c.id == case_id)


def _resolved(c, extra: dict | None = None, **settings):
    """(workload, topology) of case ``c``, with the ``extra`` overrides and ``settings`` over
    its stack settings."""
    over = {**c.spec["overrides"], **(extra or {})}
    if settings:
        w = resolve(c.spec["workload"], c.topology, over, c.topology_overrides)[0]
        over = {**over, "training.stack_settings": {**(w.training.stack_settings or {}),
                                                    **settings}}
    return resolve(c.spec["workload"], c.topology, over, c.topology_overrides)


@pytest.mark.parametrize("case_id", ["automodel-kimi-k2-h100-256g-bf16",
                                     "moe-automodel-deepseek-v3-h100-256g-bf16"])
def test_automodel_pipeline_runs_wait_slot_by_slot(case_id):
    c = _case(case_id)
    lock = simulate_resolved(*_resolved(c))[0]
    free = simulate_resolved(*_resolved(c, **{"pipeline.lockstep": False}))[0]
    # torch 2.8's runtime: each slot's transfers exposed, neighbours paced together
    assert lock.step_time_s > free.step_time_s * 1.01
    assert lock.exposed_comm_s["pp"] > 5 * free.exposed_comm_s["pp"]
    assert lock.step_time_s < c.measured  # both runs remain too fast (validation/analysis.md)


@pytest.mark.parametrize("case_id", ["automodel-kimi-k2-h100-256g-bf16",
                                     "moe-automodel-deepseek-v3-h100-256g-bf16"])
def test_automodel_moe_stages_sync_fsdp_every_micro_batch(case_id):
    """At 89e3a9fdd AutoModel's MoE parallelizer fully_shards a stage's blocks, embedding and
    head but not the stage's own module, so torch's PipelineStage finds no FSDPModule to turn
    gradient sync off on: every micro-batch's backward reduce-scatters and reshards (fixed by
    MoEFSDPSyncMixin in 2c236e081). The two runs measured before the fix state it."""
    c = _case(case_id)
    w, t = _resolved(c)
    assert not once_per_schedule(w, run_stack(w.training))
    assert load_stack("nemo-automodel").sync_once_per_schedule  # the profile keeps torch's path
    per_mb = simulate_resolved(w, t)[0]
    once = simulate_resolved(*_resolved(c, **{"fsdp.sync_once_per_schedule": True}))[0]
    # a fp32 reduce-scatter and a re-gather of every stage's dense weights per micro-batch
    assert per_mb.step_time_s > once.step_time_s * 1.02
    assert per_mb.exposed_comm_s["dp"] > once.exposed_comm_s["dp"]
    # both runs are too fast (validation/analysis.md): the code's sync is the nearer one
    assert per_mb.step_time_s < c.measured
    assert per_mb.step_time_s / c.measured - 1 > -0.12


@pytest.mark.parametrize("case_id", ["automodel-kimi-k2-h100-256g-bf16",
                                     "moe-automodel-deepseek-v3-h100-256g-bf16"])
def test_automodel_moe_shared_expert_runs_beside_the_dispatch(case_id):
    # MoE.forward (components/moe/layers.py at 89e3a9fdd) runs the shared expert on a
    # second stream while the routed tokens are dispatched: the cases state the overlap
    c = _case(case_id)
    w, t = _resolved(c)
    assert w.model.moe.shared_expert_overlap
    side = simulate_resolved(w, t)[0]
    serial = simulate_resolved(*_resolved(c, {"model.moe.shared_expert_overlap": False}))[0]
    assert side.exposed_comm_s["ep"] < serial.exposed_comm_s["ep"]
    assert side.step_time_s < serial.step_time_s


def test_the_result_says_which_runtime_replayed_the_pipeline():
    base = {"training.stack": "nemo-automodel", "training.stack_release": "AutoModel 2025-10",
            "training.use_megatron_fsdp": True, "parallelism.pipeline": 4,
            "parallelism.data": 2, "training.global_batch_size": 16}
    w, t = resolve("llama3-8b", "dgx-h100", {**base, "parallelism.virtual_pipeline": 2,
                                             "parallelism.pipeline_schedule": "interleaved"})
    assert any("lock-step time slots" in n for n in simulate_resolved(w, t)[0].notes)
    w, t = resolve("llama3-8b", "dgx-h100", {**base, "parallelism.pipeline_schedule": "1f1b"})
    assert any("replayed asynchronously" in n for n in simulate_resolved(w, t)[0].notes)
    w, t = resolve("llama3-8b", "dgx-h100", {**base, "training.stack_release": None,
                                             "parallelism.pipeline_schedule": "1f1b"})
    assert not any("pipeline runtime" in n for n in simulate_resolved(w, t)[0].notes)
