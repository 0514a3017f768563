"""Turn op lists into timed phases: durations, overlap and exposed communication.

A *phase* is what one simulated rank does between two pipeline events: the
forward, or the (recompute +) backward, of one model chunk for one micro-batch.
Inside a phase the compute stream runs ops back to back; TP collectives run on
their own stream and leave only their *exposed* part on the critical path:

* with ``async_tensor_model_parallel_allreduce`` (default), the collective on a
  column-parallel GEMM's input gradient (all-reduce,
  or reduce-scatter with sequence parallelism) runs beside that GEMM's
  weight-gradient half (Megatron's asynchronous TP all-reduce; the wgrad GEMM is
  half the backward FLOPs): exposed ``max(0, comm - gemm_bwd / 2)``; with sequence
  parallelism the re-gather of that GEMM's input runs beside its data-gradient half;
* with ``tp_comm_overlap`` (Transformer Engine userbuffers, sequence parallel
  only) every all-gather is split and pipelined with the GEMM that consumes it
  and every reduce-scatter with the GEMM that produces it (Wang et al. 2022,
  "Overlap Communication with Dependent Computation via Decomposition"):
  exposed ``max(0, comm - gemm)`` in the forward, ``max(0, comm - gemm_bwd / 2)``
  in the backward, where each collective runs beside one half of the GEMM;
* everything else is exposed in full.

Overlap is not free: the GEMM under a collective runs ``comm_overlap_slowdown``
slower for the overlapped time (SMs and HBM taken by the collective's kernels).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..collectives import collective_time
from ..compute import attention_time, fp8_attention, gemm_time, memory_time
from ..compute.attention import kernel_efficiency
from ..hardware import Placement, Topology
from .context import AttnCost
from .ops import REGATHER, Op, nearest_gemm


@dataclass(frozen=True)
class TimedOp:
    """An op placed in a phase: ``start`` is the offset from the phase start (s)."""

    name: str
    stream: str  # "compute" | "tp" | "cp" | "ep"
    start: float
    duration: float
    flops: float
    nbytes: float


@dataclass
class Phase:
    """Cost of one phase on one simulated rank (seconds)."""

    duration: float = 0.0
    compute: float = 0.0
    exposed: dict[str, float] = field(default_factory=lambda: {"tp": 0.0, "cp": 0.0, "ep": 0.0})
    flops: float = 0.0
    model_flops: float = 0.0
    ops: list[TimedOp] = field(default_factory=list)

    def extend(self, other: Phase, times: int = 1, ops: bool = True) -> None:
        """Append ``other`` ``times`` times (identical layers); ``ops=False`` keeps totals only."""
        if ops:
            for i in range(times):
                base = self.duration + i * other.duration
                self.ops.extend(TimedOp(o.name, o.stream, base + o.start, o.duration, o.flops,
                                        o.nbytes) for o in other.ops)
        self.duration += other.duration * times
        self.compute += other.compute * times
        for k, v in other.exposed.items():
            self.exposed[k] = self.exposed.get(k, 0.0) + v * times
        self.flops += other.flops * times
        self.model_flops += other.model_flops * times


@dataclass(frozen=True)
class CostContext:
    """What costing needs: the hardware, where each group sits, the GEMM dtype.

    ``attention``: optional replacement cost of the attention core, called as
    ``attention(op, backward) -> AttnCost`` (context parallelism).
    """

    topo: Topology
    groups: dict[str, Placement]
    dtype: str
    tp_overlap: bool
    attention: Callable[[Op, bool], AttnCost] | None = None
    async_grad_allreduce: bool = True


def op_time(op: Op, ctx: CostContext) -> float:
    """Seconds for one op on one GPU (compute) or one group (collective)."""
    gpu = ctx.topo.gpu
    if op.kind == "gemm":
        m, n, k = op.shape
        return gemm_time(m, n, k, gpu, op.dtype or ctx.dtype, batch=op.batch)
    if op.kind == "attn":
        if op.attn is None:
            return attention_time(op.flops, gpu)
        eff = kernel_efficiency(*op.attn[:1], gpu, *op.attn[1:])
        if op.fp8_attn is not None:
            eff *= fp8_attention.pass_speed(op.fp8_attn, gpu, op.attn[2], op.attn[3])
        return attention_time(op.flops, gpu, eff)
    if op.kind == "mem":
        return memory_time(op.nbytes, gpu)
    return collective_time(op.comm, op.nbytes, ctx.groups[op.axis], ctx.topo)


def cost_ops(ops: list[Op], ctx: CostContext) -> Phase:
    """Time a straight-line op list (one layer), with TP overlap where enabled.

    A pure function of the ops and the context: the topology remembers the answer (a
    sweep's plans share layer shapes), and each caller gets its own copy. Not with a
    context-parallel attention model, a closure over one plan."""
    if ctx.attention is not None:
        return _cost_ops(ops, ctx)
    key = ("cost_ops", tuple(ops), ctx.dtype, ctx.tp_overlap, ctx.async_grad_allreduce,
           tuple(sorted(ctx.groups.items())))
    ph = ctx.topo.memo(key, lambda: _cost_ops(ops, ctx))
    return Phase(ph.duration, ph.compute, dict(ph.exposed), ph.flops, ph.model_flops,
                 list(ph.ops))


def _cost_ops(ops: list[Op], ctx: CostContext) -> Phase:
    times = [op_time(o, ctx) for o in ops]
    hidden = _overlap_partners(ops, ctx.tp_overlap, ctx.async_grad_allreduce)
    kappa = ctx.topo.gpu.comm_overlap_slowdown
    ph = Phase()
    t = 0.0
    for i, (op, dur) in enumerate(zip(ops, times, strict=True)):
        if op.kind == "attn" and ctx.attention is not None:
            t = _context_attention(ph, op, ctx, t)
            continue
        if op.kind == "comm":
            pair = hidden.get(i)
            exposed = dur if pair is None else _exposed(dur, pair[1] * times[pair[0]], kappa)
            start = t if pair is None else _partner_start(ph, ops[pair[0]].name, t)
            ph.ops.append(TimedOp(op.name, op.axis, start, dur, 0.0, op.nbytes))
            ph.exposed[op.axis] = ph.exposed.get(op.axis, 0.0) + exposed
            t += exposed
            continue
        ph.ops.append(TimedOp(op.name, "compute", t, dur, op.flops, op.nbytes))
        ph.compute += dur
        ph.flops += op.flops
        ph.model_flops += op.model_flops
        t += dur
    ph.duration = t
    return ph


def _exposed(comm: float, hiding: float, kappa: float) -> float:
    """Critical-path seconds of a collective overlapped with ``hiding`` seconds of compute.

    ``max(0, comm - hiding)`` stays exposed, and the compute it overlaps runs
    ``kappa`` slower for the overlapped time, because the collective's kernels
    occupy SMs and HBM bandwidth (``gpu.comm_overlap_slowdown``; NCCL runs one
    thread block per channel, each on its own SM).
    """
    return max(0.0, comm - hiding) + kappa * min(comm, hiding)


def _context_attention(ph: Phase, op: Op, ctx: CostContext, t: float) -> float:
    """Place a context-parallel attention: slowest rank's compute plus exposed CP comm."""
    assert ctx.attention is not None
    cost = ctx.attention(op, op.name.endswith("_bwd"))
    ph.ops.append(TimedOp(op.name, "compute", t, cost.compute, op.flops, 0.0))
    if cost.exposed_comm > 0:
        ph.ops.append(TimedOp(op.name + "_kv_ring", "cp", t, cost.critical, 0.0, 0.0))
    ph.compute += cost.compute
    ph.exposed["cp"] = ph.exposed.get("cp", 0.0) + cost.exposed_comm
    ph.flops += op.flops
    ph.model_flops += op.model_flops
    return t + cost.critical


def _partner_start(ph: Phase, name: str, now: float) -> float:
    for o in reversed(ph.ops):
        if o.name == name:
            return o.start
    return now


def _overlap_partners(ops: list[Op], tp_overlap: bool, async_grad: bool = True
                      ) -> dict[int, tuple[int, float]]:
    """Map each TP collective to (the GEMM that hides it, the fraction of that GEMM).

    A backward GEMM op is the data-gradient and the weight-gradient GEMM together (half
    the FLOPs each); a collective that runs beside only one of them gets half. With
    ``async_grad`` (Megatron's default): the collective on a column-parallel GEMM's input
    gradient, right after that GEMM's backward, runs beside its weight-gradient half, and
    the sequence-parallel re-gather of its input (``*_regather``, right before it) beside
    its data-gradient half (Megatron-Core ``LinearWithGradAccumulationAndAsyncCommunication``
    launches the all-gather, runs the data-gradient GEMM, then waits). With
    ``tp_comm_overlap`` (sequence parallel only; Transformer Engine userbuffers,
    ``initialize_ub``) all-gathers pair with the next GEMM and reduce-scatters with the
    previous one: the whole GEMM in the forward, and in the backward the half they run
    beside (the output-gradient all-gather of a row-parallel layer, ``proj_dgrad`` /
    ``fc2_dgrad``, with its data-gradient GEMM; the bulk re-gather and reduce-scatter of a
    column-parallel layer, ``qkv_dgrad`` / ``qkv_wgrad``, with its data- and its
    weight-gradient GEMM).
    """
    pairs: dict[int, tuple[int, float]] = {}
    for i, op in enumerate(ops):
        if op.kind != "comm" or op.axis != "tp":
            continue
        prev = i - 1 if i > 0 and ops[i - 1].kind == "gemm" else None
        if async_grad and prev is not None and ops[prev].column \
                and ops[prev].name.endswith("_bwd") and op.comm in ("all_reduce", "reduce_scatter"):
            pairs[i] = (prev, 0.5)
            continue
        if async_grad and op.name.endswith(REGATHER) and i + 1 < len(ops) \
                and ops[i + 1].kind == "gemm":
            pairs[i] = (i + 1, 0.5)
            continue
        if not tp_overlap:
            continue
        if op.comm == "all_gather":
            j = nearest_gemm(ops, i, +1)
        elif op.comm == "reduce_scatter":
            j = nearest_gemm(ops, i, -1)
        else:
            j = None
        if j is not None:
            pairs[i] = (j, 0.5 if ops[j].name.endswith("_bwd") else 1.0)
    return pairs
