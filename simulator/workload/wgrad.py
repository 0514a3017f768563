"""The weight-gradient (W) part of a backward, for schedules that split B and W.

Each forward GEMM ``Y = X W`` (``m x k`` times ``k x n``) has two backward
GEMMs of equal FLOPs ``2mnk``: the input gradient ``dX = dY W^T`` (B, on the
pipeline's critical path) and the weight gradient ``dW = X^T dY`` (W, a
``k x n`` output with inner dimension ``m``), which zero-bubble schedules
defer (Qi et al. 2024, Sec. 2). The backward phase the plan costs holds both
(:func:`~.ops.backward_of`: a ``_bwd`` GEMM of twice the forward FLOPs); here
the W GEMMs are costed on their own, with their own shape, and the engine runs
the B step as the backward minus W. Attention's core, norms and collectives
have no weights and stay in B; a routed expert's W is half its backward
grouped GEMM time (the same split). Units: seconds.
"""

from __future__ import annotations

from .cost import CostContext, op_time
from .ops import Op, gemm


def wgrad_ops(fwd: list[Op]) -> list[Op]:
    """The weight-gradient GEMM of every forward GEMM but a frozen one (LoRA's base
    layers): ``(k, n, m)`` for a ``(m, n, k)`` one."""
    return [gemm(o.name + "_wgrad", o.shape[2], o.shape[1], o.shape[0], o.batch)
            for o in fwd if o.kind == "gemm" and not o.frozen]


def wgrad_time(fwd: list[Op], ctx: CostContext) -> float:
    """Seconds of the weight-gradient GEMMs of a forward op list, back to back."""
    return sum(op_time(o, ctx) for o in wgrad_ops(fwd))
