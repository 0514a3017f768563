"""A workload's stack profile applied to its op lists (``training.stack``, stacks/*.yaml).

Eager stacks move more HBM bytes per elementwise op than fused ones (the profile's
``launch.elementwise_bytes_factor``, per op name); the attention kernel family follows the
stack and its release (:mod:`simulator.compute.attention`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.stacks import Stack, run_stack
from ..config.workload import Workload
from .opcopy import derive

if TYPE_CHECKING:  # the Op type only; ops.py imports this module
    from .ops import Op


def stack_of(w: Workload) -> Stack:
    """The workload's stack profile (``training.stack``, stacks/<name>.yaml)."""
    return run_stack(w.training)


def attention_family(w: Workload) -> str:
    """The attention kernel family of the workload's stack and release."""
    return stack_of(w).attention_for(w.training.stack_release)


def with_stack_kernels(w: Workload, ops: list[Op]) -> list[Op]:
    """``ops`` with each bandwidth-bound op's bytes scaled by the stack's elementwise
    factor (eager kernels move more bytes than fused ones; stacks/*.yaml ``launch``)."""
    factors = stack_of(w).elementwise
    if not factors:
        return ops
    return [derive(o, nbytes=o.nbytes * factors[o.name],
                   bwd_nbytes=None if o.bwd_nbytes is None else o.bwd_nbytes * factors[o.name])
            if o.kind == "mem" and o.name in factors else o for o in ops]
