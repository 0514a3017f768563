"""Worker side of the plan search: memory fit, then a lower bound on the step time.

For one shape (a plan without recompute) :func:`fit_and_bound` tries
recompute ``none``, ``selective``, ``full`` in that order with the memory
model (:func:`~simulator.memory.estimate_memory`, about half a millisecond)
and keeps the first that fits: more recompute only adds work, so a lighter
setting that fits dominates the heavier ones. For that plan it costs the
phases (:func:`~simulator.workload.plan.build_plan` with ``bound_only``: no op
timelines, no DP buckets; a few milliseconds, no
event simulation) and returns :func:`step_lower_bound`.

The bound follows the engine's dependencies (see :mod:`simulator.engine`):
each stage's compute stream is serial, so on stage ``s``

* its first forward cannot start before the stages holding the earlier global
  chunks ran that same forward (the activation travels down the pipeline, by
  the schedule's send rule :meth:`~simulator.schedules.Route.before`): ``head_s``;
* after its last backward, those stages must each run that micro-batch's
  backward (its input-gradient part) in turn before the stage holding global
  chunk 0 can reach its optimizer: ``tail_s``;
so the step takes at least ``head_s + busy_s + max(opt_s, tail_s + opt_0)``
where ``busy_s`` sums all of the stage's phases (less what F&B pairs could hide). With
post-validation (stages do not meet at the optimizer; ZB-H2) the step is the longest
stage's own span, and neither ``head_s`` nor ``tail_s`` binds; there, the stage's
first backward that waits for a gradient cannot start before that micro-batch went
forward and back through every later global chunk, which the steps it runs meanwhile
may not fill, so the span is at least ``busy_s + idle_s + opt_s`` (:func:`_round_trip`;
it lifts ZB-H2's bound from as low as 0.05 to 0.65 of the simulated step with few
micro-batches; with the head and tail terms it adds too little to pay for its walk).
Transfers, DP sync and parameter all-gathers only add to it. With equal stages this is exactly the
(interleaved) 1F1B step time without communication, so the bound is tight and
lets the search skip any plan whose bound exceeds the K-th best simulated step.

It holds for every registered schedule (tested on a grid of small plans for each):
a split backward still costs ``bwd`` in all (B is ``bwd - wgrad``, W is
``wgrad``), and a trailing W puts no backward chain after the stage's last step;
a V shape's or DualPipe's chunks come in through :meth:`Route.before` like any
other; an F&B pair (DualPipe) hides at most both phases' exposed all-to-all
(the engine's slot hides ``min(ef, db-eb) + min(eb, df-ef)``, less its slowdown);
with post-validation only the stage's own span binds. It is looser for
the zero-bubble and DualPipe schedules than for 1F1B (about 0.7-0.99 of the
simulated step on small plans, lowest with few micro-batches or MoE), so
``--schedules all`` prunes less and simulates more. Summation order can put
it one rounding error (~1e-16 relative) above an exactly equal simulated step.

MoE: the bound reads the very phase tables the simulation replays, each (layer,
micro-batch) priced with its own router draw, so the argument above holds as is.
Pricing every expert at the mean (uniform) load instead is not a provable lower bound:
an expert's time jumps at its first token (launch overheads; a Mixtral 8x7B expert
on H100: 8 us idle, 106 us for one token, then linear), so where a rank holds
several experts a draw that leaves one idle costs less than the even split (Jensen
on a concave kink), and the bound is not monotone in every table either (the W
split and the round trip subtract). The search keeps the exact tables and makes
them cheap instead: plans whose draws coincide share one drawn table and its
all-to-all volumes (:func:`~simulator.workload.moe.draws.draw_table`), and the
bound-only plan builds nothing else (tests/test_search_moe.py checks the bound
against the simulated step and the search against one that draws afresh).
"""

from __future__ import annotations

import math
from itertools import pairwise

from ..config import TopologyConfig, Workload
from ..config.validate import op_sac_problem
from ..engine import EngineInput
from ..engine.step_rule import duration, most_hidden
from ..errors import ConfigError
from ..hardware import Topology
from ..memory import estimate_memory
from ..metrics.variability import Variability, expected_input, host_term
from ..schedules import FusedStep, Route, Schedule, is_fused
from ..shape.plan_shape import routed_tokens
from ..workload.plan import build_plan
from .candidates import RECOMPUTE, with_recompute


def step_lower_bound(inp: EngineInput) -> float:
    """Seconds the simulated step cannot beat (see the module docstring)."""
    fwd, bwd, opt = inp.fwd, inp.bwd, inp.optimizer
    b_only = bwd - inp.wgrad if inp.wgrad is not None else bwd
    busy = fwd.sum(axis=(1, 2)) + bwd.sum(axis=(1, 2))
    route = inp.route or Schedule().route(len(inp.schedule), fwd.shape[1])
    best = 0.0
    for s, steps in enumerate(inp.schedule):
        busy[s] -= _fused_hiding(inp, s, steps)
        best = max(best, float(busy[s] + opt[s]))
        if inp.post_validation:  # the stage's own span: its round trip is all that binds
            best = max(best, float(busy[s] + opt[s]) + _round_trip(inp, route, s, steps, b_only))
            continue
        first = steps[0]
        last = steps[-1]  # trailing W steps can overlap the tail: no tail term then
        head = sum(float(fwd[q, c, first.mb]) for q, c in route.before(s, first.chunk)) \
            if first.phase == "F" else 0.0
        own = head + float(busy[s])
        best = max(best, own + float(opt[s]))
        chain = route.before(s, last.chunk)
        if chain and last.phase == "B":
            tail = sum(float(b_only[q, c, last.mb]) for q, c in chain)
            best = max(best, own + tail + float(opt[chain[0][0]]))
    return best


def _round_trip(inp: EngineInput, route: Route, s: int, steps: list, b_only) -> float:
    """Idle time stage ``s`` cannot avoid before its first backward that waits for a gradient.

    That B of micro-batch ``mb`` on chunk ``c`` (global chunk ``g``) starts only after
    its own F on ``s`` ended and the forwards then backwards (input-gradient part) of
    ``mb`` on every later global chunk ran one after another: ``gap`` seconds. On ``s``
    only the steps between that F and that B (``middle``, priced at their largest:
    an unsplit backward) can fill it, so the stage's span is at least its busy time
    plus ``gap - middle``. Returns 0 when that is not positive, or when an F&B pair
    comes before that B (a fused slot's share is not its own duration).
    """
    first_f: dict[tuple[int, int], int] = {}
    for k, x in enumerate(steps):
        if is_fused(x):
            return 0.0
        if x.phase == "F":
            first_f.setdefault((x.mb, x.chunk), k)
        elif x.phase == "B" and route.waits(s, x):
            break
    else:
        return 0.0
    i_f = first_f.get((x.mb, x.chunk))
    if i_f is None:
        return 0.0
    wgrad = inp.wgrad
    middle = sum(duration(y.phase, float(inp.fwd[s, y.chunk, y.mb]),
                          float(inp.bwd[s, y.chunk, y.mb]),
                          float(wgrad[s, y.chunk, y.mb]) if wgrad is not None else 0.0, False)
                 for y in steps[i_f + 1:k])
    copy, g = route.place[(s, x.chunk)]
    later = [route.holder[(copy, h)] for h in range(g + 1, route.chunks_per_copy)]
    gap = sum(float(inp.fwd[q, c, x.mb] + b_only[q, c, x.mb]) for q, c in later)
    return max(0.0, gap - middle)


def _fused_hiding(inp: EngineInput, s: int, steps: list) -> float:
    """Most EP time an F&B pair can hide (both phases' exposed all-to-all), summed."""
    if inp.fwd_ep is None or inp.bwd_ep is None or not (inp.fwd_ep.any() or inp.bwd_ep.any()):
        return 0.0  # nothing to hide (dense): skip the walk over the steps
    if FusedStep not in set(map(type, steps)):
        return 0.0  # no F&B pair (all but DualPipe): a C-speed look instead of the walk
    return sum(most_hidden(inp.fwd_ep[s, x.chunk, x.mb], inp.bwd_ep[s, y.chunk, y.mb])
               for x, y in pairwise(steps) if is_fused(x))


def draw_group(w: Workload) -> tuple:
    """Plans with one key read the same router draws (tokens routed per micro-batch over
    the EP group, micro-batches; the rest of the key of
    :func:`~simulator.workload.moe.draws.draw_table` is the search's base workload): costed
    in one worker, they share its drawn tables and their costs. Dense: ``()``."""
    if w.model.moe is None:
        return ()
    return routed_tokens(w) * w.parallelism.expert, w.num_microbatches


def expected_lower_bound(inp: EngineInput, w: Workload, t: TopologyConfig) -> float:
    """Seconds the simulated (expected) step cannot beat: :func:`step_lower_bound` of the
    input with the variability's expected phase factors and barrier waits, plus the host
    term (:func:`simulator.metrics.variability.expected_input`)."""
    v = Variability.of(w, t)
    if v.zero:
        return step_lower_bound(inp)
    return step_lower_bound(expected_input(inp, v)) + host_term(v)


def fit_and_bound_group(items: list[tuple[Workload, TopologyConfig]]
                        ) -> list[tuple[str | None, tuple[float, ...], float, str | None]]:
    """:func:`fit_and_bound` of each item, in one task."""
    return [fit_and_bound(item) for item in items]


def fit_and_bound(item: tuple[Workload, TopologyConfig]
                  ) -> tuple[str | None, tuple[float, ...], float, str | None]:
    """(lightest recompute that fits or None, GB per recompute tried, bound s, error).

    A recompute the stack cannot run on this model (torchtitan's per-op selective policy on
    MoE or MLA layers: :func:`~simulator.config.validate.op_sac_problem`) is skipped, its
    GB NaN. The error is a ConfigError message raised while costing (the plan is then
    invalid), else None.
    """
    w, t = item
    topo = Topology.from_config(t)
    tried: list[float] = []
    try:
        for rc in RECOMPUTE:
            wr = with_recompute(w, rc)
            if op_sac_problem(wr) is not None:
                tried.append(math.nan)
                continue
            mem = estimate_memory(wr, topo)
            tried.append(mem.memory_per_gpu_GB)
            if mem.fits:
                cheap = build_plan(wr, topo, bound_only=True)  # phase times only
                return rc, tuple(tried), expected_lower_bound(cheap.engine_input, wr, t), None
    except ConfigError as exc:
        return None, tuple(tried), float("inf"), exc.message()
    return None, tuple(tried), float("inf"), None
