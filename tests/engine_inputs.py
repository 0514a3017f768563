"""Random engine inputs shared by the replay tests: every schedule's steps with times drawn
per (stage, chunk, micro-batch), p2p links, gradient buckets and W splits."""

from __future__ import annotations

import numpy as np

from simulator.engine import EngineInput
from simulator.schedules import SCHEDULES


def random_input(name: str, p: int, m: int, v: int, seed: int,
                 overlap_grad: bool = True) -> EngineInput:
    sched = SCHEDULES[name]
    sched.check(p, m, v)
    n = sched.chunks(v)
    rng = np.random.default_rng(seed)
    full = (p, n, m)
    bwd = rng.uniform(1.0, 3.0, full)
    buckets = [[list(rng.uniform(0.1, 0.5, rng.integers(0, 3))) for _ in range(n)]
               for _ in range(p)]
    return EngineInput(
        sched.steps(p, m, v), rng.uniform(0.5, 1.5, full), bwd, rng.uniform(0.0, 0.3, p),
        buckets, rng.uniform(0.0, 0.5, p), rng.uniform(0.0, 0.4, p),
        route=sched.route(p, v), post_validation=sched.post_validation,
        wgrad=bwd * rng.uniform(0.2, 0.5, full) if sched.uses_w else None,
        fwd_ep=rng.uniform(0.0, 0.2, full), bwd_ep=rng.uniform(0.0, 0.2, full),
        overlap_grad_reduce=overlap_grad, overlap_slowdown=0.1, p2p_bytes=1e6)
