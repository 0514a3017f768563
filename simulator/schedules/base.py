"""The schedule interface: what a pipeline schedule tells the engine and the memory model.

A schedule answers five questions about ``p`` stages, ``m`` micro-batches and
``v`` chunks per stage; nothing else in the simulator depends on which schedule runs.

1. **Placement** (:meth:`Schedule.place`): which piece of the model stage ``s``
   holds as its chunk ``c``: ``(copy, g)``, global chunk ``g`` of model copy
   ``copy``. Megatron's interleaving puts global chunk ``c*p + s`` there; a
   V shape puts ``s`` and ``2p-1-s``; DualPipe holds two copies of the model.
   The layer split (:mod:`simulator.shape.partition`) and the send rule
   (:class:`Route`) both derive from it.
2. **Order** (:meth:`Schedule.steps`): per stage, the ordered list of
   :class:`Step` ``(phase, mb, chunk)``. ``phase`` is ``"F"``
   (forward), ``"B"`` (backward; only the input gradient when the schedule
   also lists a ``"W"`` for that micro-batch and chunk) or ``"W"`` (the
   weight gradient). A :class:`FusedStep` is an ``F`` that runs overlapped
   with the next step, a ``B`` of another micro-batch (DualPipe's F&B).
3. **Memory** (:meth:`Schedule.in_flight`, :meth:`Schedule.w_deferred`):
   micro-batches whose activations a stage holds at its peak, in units of a
   stage's layers, and how many of them are only W-deferred tensors.
4. **Rules** (:meth:`Schedule.check`): which ``(p, m, v)`` it accepts, raising
   :class:`~simulator.errors.ConfigError`.
5. **Step end** (:attr:`Schedule.post_validation`): whether stages may start
   the next step without a global optimizer synchronisation (the zero-bubble
   paper's post-validation), which makes the steady-state step time the
   longest stage's own span.

The engine adds the data dependencies (a forward waits for its input from
the stage holding the previous global chunk, a backward for the gradient from
the next, a W for nothing but its own B, which the order already guarantees),
so a schedule only says *order*, never timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from ..errors import ConfigError


class Step(NamedTuple):
    phase: str  # "F" | "B" | "W"
    mb: int
    chunk: int


class FusedStep(Step):
    """An ``F`` step that runs overlapped with the next step, a ``B`` (DualPipe's F&B)."""

    fused = True


def is_fused(step: Step) -> bool:
    return isinstance(step, FusedStep)


Hop = tuple[int, int]  # (stage, chunk)


@dataclass(frozen=True)
class Route:
    """The one send rule: where a phase's output goes and which input a phase waits for.

    Built from the schedule's placement: the forward of global chunk ``g`` feeds
    ``g+1`` of the same model copy, the backward feeds ``g-1``. A hop to the
    same stage (a V shape's turn) is local: no transfer.
    """

    place: dict[Hop, tuple[int, int]]  # (stage, chunk) -> (copy, global chunk)
    holder: dict[tuple[int, int], Hop]  # (copy, global chunk) -> (stage, chunk)
    chunks_per_copy: int  # global chunks G of one model copy

    @classmethod
    def build(cls, place: dict[Hop, tuple[int, int]]) -> Route:
        holder = {g: sc for sc, g in place.items()}
        return cls(place=place, holder=holder,
                   chunks_per_copy=1 + max(g for _, g in place.values()))

    def first(self, stage: int, chunk: int) -> bool:
        """Holds global chunk 0 (the embedding)."""
        return self.place[(stage, chunk)][1] == 0

    def last(self, stage: int, chunk: int) -> bool:
        """Holds the last global chunk (output layer and loss)."""
        return self.place[(stage, chunk)][1] == self.chunks_per_copy - 1

    def dst(self, stage: int, step: Step) -> Hop | None:
        """(stage, chunk) that consumes this step's output, or None (loss / input end / W)."""
        if step.phase == "W":
            return None
        copy, g = self.place[(stage, step.chunk)]
        g += 1 if step.phase == "F" else -1
        return self.holder.get((copy, g))

    def before(self, stage: int, chunk: int) -> list[Hop]:
        """Holders of the global chunks ahead of (stage, chunk) in its model copy, from 0:
        the forward's path to here, and the backward's path from here (reversed)."""
        copy, g = self.place[(stage, chunk)]
        return [self.holder[(copy, k)] for k in range(g)]

    def waits(self, stage: int, step: Step) -> bool:
        """Whether this step waits for a transfer (False: its input is local)."""
        if step.phase == "F":
            return not self.first(stage, step.chunk)
        if step.phase == "B":
            return not self.last(stage, step.chunk)
        return False


class Schedule:
    """Base class: Megatron placement, 1F1B-like memory, no extra rules.

    Subclasses set ``name`` and ``source`` and override :meth:`steps` and what
    differs. One instance per schedule, named ``SCHEDULE`` in its module.
    """

    name = ""
    source = ""
    uses_w = False  # lists W steps (backward split into B and W)
    post_validation = False
    virtual = False  # takes parallelism.virtual_pipeline > 1 (Megatron's interleaving)

    def chunks(self, v: int) -> int:
        """Chunks per stage (the engine's second axis)."""
        return v

    def place(self, p: int, v: int, stage: int, chunk: int) -> tuple[int, int]:
        """(model copy, global chunk) held by ``stage`` as ``chunk``: Megatron's ``c*p + s``."""
        return 0, chunk * p + stage

    def route(self, p: int, v: int) -> Route:
        n = self.chunks(v)
        return Route.build({(s, c): self.place(p, v, s, c) for s in range(p) for c in range(n)})

    def steps(self, p: int, m: int, v: int) -> list[list[Step]]:
        raise NotImplementedError

    def in_flight(self, p: int, m: int, v: int, stage: int) -> float:
        """Micro-batches of activations ``stage`` holds at its peak (1F1B: ``min(p-s, m)``)."""
        return float(min(p - stage, m))

    def w_deferred(self, p: int, m: int, v: int, stage: int) -> float:
        """Of :meth:`in_flight`, micro-batches held only for a deferred W (inputs of the
        weight-gradient GEMMs and the output gradients)."""
        return 0.0

    def outputs_held(self, p: int, m: int, v: int) -> int:
        """Micro-batches whose output-layer activations (the logits' inputs) the last stage
        holds at its peak: one, each backward right after its forward (GPipe: all ``m``)."""
        return 1

    def p2p_buffers(self) -> int:
        """Boundary-activation send + receive buffer pairs a stage keeps (one; two when a
        forward's and a backward's transfers overlap, as under interleaving)."""
        return 1

    def param_copies(self, p: int, v: int) -> int:
        """Model copies a stage's chunks come from (2 for DualPipe)."""
        return 1 + max(self.place(p, v, 0, c)[0] for c in range(self.chunks(v)))

    def time_steps(self, p: int, m: int, v: int) -> list[list[int]] | None:
        """Per stage, the lock-step time slot of each of its :meth:`steps` as
        ``torch.distributed.pipelining`` lays the schedule out (``pipeline_order``, one
        compute action or an empty slot per rank and slot), or None where no PyTorch
        schedule runs this order (:mod:`simulator.engine.lockstep`)."""
        return None

    def check(self, p: int, m: int, v: int) -> None:
        """Raise ConfigError if the schedule cannot run ``p`` stages and ``m`` micro-batches.

        Default: a virtual pipeline (``v > 1``) exactly when the schedule is ``virtual``
        (only the interleaved schedule is); the plan search pairs VP with schedules by
        the same flag."""
        if self.virtual:
            need(v >= 2, "parallelism.virtual_pipeline", v,
                 f"must be >= 2 with pipeline_schedule '{self.name}'")
        else:
            need(v == 1, "parallelism.pipeline_schedule", self.name,
                 "must be 'interleaved' when virtual_pipeline > 1")


def live_peak(steps: list[Step], chunks: int) -> tuple[float, float]:
    """(peak, W-only at the peak) of chunk-micro-batches held, counted over one stage's order,
    in units of the stage (``/ chunks``).

    A micro-batch's chunk is held from its F until its W (backward split) or its B
    (not split); between its B and its W it holds only the W-deferred tensors.
    Counting those as whole activations is an upper bound (the inputs of the
    weight-gradient GEMMs and the output gradients are most of a layer's
    activations, Qi et al. 2024 Sec. 3.3 count them as ``M_B``).
    """
    split = {(x.mb, x.chunk) for x in steps if x.phase == "W"}
    live = w_only = 0
    peak = (0, 0)
    for x in steps:
        key = (x.mb, x.chunk)
        if x.phase == "F":
            live += 1
        elif x.phase == "B" and key in split:
            w_only += 1
        else:  # W, or an unsplit B
            live -= 1
            w_only -= x.phase == "W"
        peak = max(peak, (live, w_only))
    return peak[0] / chunks, peak[1] / chunks


class Counted(Schedule):
    """A schedule whose memory is counted from its own order (:func:`live_peak`)."""

    @lru_cache(maxsize=64)  # noqa: B019 - one instance per schedule, sizes are small ints
    def _peaks(self, p: int, m: int, v: int) -> tuple[tuple[float, float], ...]:
        n = self.chunks(v)
        return tuple(live_peak(st, n) for st in self.steps(p, m, v))

    def in_flight(self, p: int, m: int, v: int, stage: int) -> float:
        return self._peaks(p, m, v)[stage][0]

    def w_deferred(self, p: int, m: int, v: int, stage: int) -> float:
        return self._peaks(p, m, v)[stage][1]


def need(cond: bool, field: str, value: object, allowed: str) -> None:
    """Raise ``ConfigError(field, value, allowed)`` unless ``cond``."""
    if not cond:
        raise ConfigError(field, value, allowed)
