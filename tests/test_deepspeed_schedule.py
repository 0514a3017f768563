"""DeepSpeed's pipeline schedule, replayed as it runs, against the engine's account of it.

DeepSpeed's ``TrainSchedule`` (deepspeed/runtime/pipe/schedule.py) runs ``2 (m + p - 1)``
steps per stage. Stages alternate by parity: on a step where stage ``s`` runs a forward its
neighbours run backwards. A forward step exchanges with the previous stage (send the last
micro-batch's input gradient, receive this micro-batch's input), a backward step with the
next (receive the output gradient, send the last forward's output), then computes. Every
transfer is a rendezvous (blocking NCCL send / receive on the compute stream). The replay
below runs that program literally, with each transfer starting when both ends reach it.

The simulator does not replay that program: ``simulator/workload/blocking_p2p.py`` adds the
two transfers to each phase that has a neighbour on its side and lets the engine run its own
1F1B. These tests hold the two to each other, with stage times from a real DeepSpeed plan.
The pipeline buffers are partitioned over the TP group (each rank sends its slice; the
receiver all-gathers the tensor before its pass), so a transfer moves ``S/t`` bytes and a
pass that received one first runs the all-gather.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.api import resolve, simulate_resolved
from simulator.collectives import collective_time
from simulator.engine import EngineInput, NullRecorder, run_engine
from simulator.workload.blocking_p2p import p2p_seconds, rendezvous_seconds
from simulator.workload.ops import dims


def _train_schedule(stage: int, p: int, m: int) -> list[tuple]:
    """Stage ``stage``'s instruction list: ("x", peer) transfers and ("F"|"B", mb) passes."""

    def micro_batch(step: int) -> tuple[int, bool]:
        even_step, even_stage = step % 2 == 0, stage % 2 == 0
        if even_step == even_stage:  # a forward step
            return (step - stage) // 2, True
        return (step - 2 * p + stage + 2) // 2, False  # a backward step

    prog, prev = [], -1
    for step in range(2 * (m + p - 1)):
        mb, forward = micro_batch(step)
        peer = stage - 1 if forward else stage + 1
        if 0 <= peer < p:
            prog += [("x", peer)] * ((0 <= prev < m) + (0 <= mb < m))
        if 0 <= mb < m:
            prog.append(("F" if forward else "B", mb))
        prev = mb
    return prog


def replay_train_schedule(fwd: np.ndarray, bwd: np.ndarray, c: float, m: int) -> float:
    """Makespan (s) of DeepSpeed's TrainSchedule with per-stage pass times ``fwd[s]``,
    ``bwd[s]`` and rendezvous transfers of ``c`` seconds."""
    p = len(fwd)
    progs = [_train_schedule(s, p, m) for s in range(p)]
    assert all(sum(op[0] == "F" for op in pr) == m for pr in progs)
    pc, t = [0] * p, [0.0] * p
    moved = True
    while moved:
        moved = False
        for s in range(p):
            while pc[s] < len(progs[s]):
                op = progs[s][pc[s]]
                if op[0] in "FB":
                    t[s] += fwd[s] if op[0] == "F" else bwd[s]
                    pc[s] += 1
                    moved = True
                    continue
                q = op[1]
                if pc[q] < len(progs[q]) and progs[q][pc[q]] == ("x", s):
                    t[s] = t[q] = max(t[s], t[q]) + c
                    pc[s] += 1
                    pc[q] += 1
                    moved = True
                else:
                    break
    assert all(pc[s] == len(progs[s]) for s in range(p)), "TrainSchedule deadlocked"
    return max(t)


def test_train_schedule_without_transfers_is_plain_1f1b():
    # equal stages, free transfers: (m + p - 1)(F + B), the 1F1B makespan
    p, m = 6, 20
    assert replay_train_schedule(np.ones(p), np.full(p, 3.0), 0.0, m) == pytest.approx(
        (m + p - 1) * 4.0)


@pytest.mark.parametrize("stages,gbs", [(4, 32), (8, 48)])
def test_engine_with_paired_transfers_matches_the_train_schedule(stages, gbs):
    # TP 8 puts every pipeline pair on InfiniBand, without SP on the whole activation
    over = {"parallelism.pipeline": stages, "parallelism.tensor": 8, "parallelism.data": 1,
            "parallelism.sequence_parallel": False, "training.global_batch_size": gbs,
            "training.use_flash_attn": False, "model.num_layers": 4 * stages}
    runs = {}
    for name in ("megatron", "deepspeed"):  # the transfers alone: the engine factor at 1
        own = {"training.stack_settings": {"efficiency.pipeline_engine": 1.0}} \
            if name == "deepspeed" else {}
        w, t = resolve("llama3-8b", "dgx-h100", dict(over, **{"training.stack": name}, **own))
        runs[name] = simulate_resolved(w, t, variability=False)[1]
    mp, dp = runs["megatron"], runs["deepspeed"]
    m = dp.engine_input.fwd.shape[2]
    full = p2p_seconds(dp.workload, dp.topo, dp.groups)  # the whole activation, one link
    x = dims(dp.workload)
    size = x.Tn * x.h * x.e  # bytes of one micro-batch's activation (no SP: whole)
    c = collective_time("send_recv", size / 8, dp.groups["pp"], dp.topo)  # one TP slice
    g = collective_time("all_gather", size, dp.groups["tp"], dp.topo)
    assert rendezvous_seconds(dp.workload, dp.topo, dp.groups) == pytest.approx(2 * c + g)
    assert c < full / 4  # eight slices on eight links
    f, b = mp.engine_input.fwd[:, 0, 0], mp.engine_input.bwd[:, 0, 0]
    assert m == gbs and np.allclose(mp.engine_input.fwd[:, 0], f[:, None])
    assert 0.02 < (2 * c + g) / f.min() < 0.5
    # the all-gather is the receiving pass's own time: forwards after the first stage,
    # backwards before the last
    fg = f + np.where(np.arange(stages) > 0, g, 0.0)
    bg = b + np.where(np.arange(stages) < stages - 1, g, 0.0)

    def engine(fwd, bwd):  # the engine's 1F1B over these phases, nothing else in the step
        p = stages
        return run_engine(EngineInput(dp.engine_input.schedule, fwd, bwd, np.zeros(p),
                                      [[[]] for _ in range(p)], np.zeros(p), np.zeros(p)),
                          NullRecorder()).step_time

    base = engine(mp.engine_input.fwd, mp.engine_input.bwd)
    assert replay_train_schedule(f, b, 0.0, m) == pytest.approx(base, rel=1e-9)
    want = replay_train_schedule(fg, bg, c, m)  # DeepSpeed's own program
    got = engine(dp.engine_input.fwd, dp.engine_input.bwd)  # the simulator's account
    assert got == pytest.approx(want, rel=0.01)
    assert 0.85 < (got - base) / (want - base) < 1.2
    # one transfer per phase (the sender alone held) falls short of the schedule's cost
    one = np.where(dp.engine_input.fwd > mp.engine_input.fwd, c + g, 0.0)
    half = engine(mp.engine_input.fwd + one, mp.engine_input.bwd + np.where(
        dp.engine_input.bwd > mp.engine_input.bwd, c + g, 0.0))
    assert (half - base) / (want - base) < 0.8
