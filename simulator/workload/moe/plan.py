"""Routed-expert parts of every chunk and micro-batch at once (router draws that vary).

With skewed or traced routing each (MoE layer, micro-batch) has its own router draw
(:mod:`.draws`), so a chunk's phases differ per micro-batch. A phase time is a sum
of op times: the chunk's other ops (dense layers, the attention and shared expert of
its MoE layers, embedding, output, offload waits) are the same for every micro-batch
and are costed once (:meth:`simulator.workload.chunk_cost.ChunkCoster.chunk` in collect mode);
the routed-expert parts (:class:`~.moe_part.MoEPart`: dispatch, experts, combine, host
stalls) add, per micro-batch, the sum over the chunk's MoE layers of the parts of their
draws. A chunk's MoE layers are consecutive, and so are their rows of the draw table
(MoE layers in order, MTP last). The sums go slot by slot: slot ``k`` of every chunk
is the draw its ``k``-th MoE layer uses at each micro-batch (a column of zeros where a
chunk has fewer layers), so each chunk's sum is its layers' parts added in layer order,
with as many numpy gathers as a chunk has MoE layers, however many chunks there are.

The forward of a MoE layer adds its forward part, the backward its backward part and,
when the layer's forward is recomputed (``recompute_modules`` moe, or full), its
forward part again; the W step (B/W-split schedules) gets half the backward expert
GEMMs of the decoder MoE layers (not the MTP ones), as in the per-micro-batch costing.
Seconds throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost import Phase
from .layer import MoECost
from .part import EP_KEYS, PART_FIELDS

_FIELD = {k: i for i, k in enumerate(PART_FIELDS)}
_EP_FIELDS = [_FIELD[k] for k in ("dispatch", "combine", "permute", "router", "experts",
                                  "exposed_ep", "hidden_ep", "host_stall")]  # EP_KEYS order
_PHASE_FIELDS = [_FIELD[k] for k in ("duration", "compute", "exposed_ep", "experts")]
D, C, X, E = range(4)  # positions in _PHASE_FIELDS


@dataclass(frozen=True)
class ChunkBase:
    """One chunk costed without its routed-expert parts (collect mode)."""

    s: int
    c: int
    mbs: list[int]  # micro-batches the chunk runs
    f: Phase  # forward without the MoE parts
    b: Phase  # backward without the MoE parts
    wg: float  # W seconds without the experts' share
    layers: list[tuple[int, bool, bool]]  # (MoE layer, forward re-run in backward, in W)


def chunk_sums(moe: MoECost, chunks: list[ChunkBase]) -> tuple[np.ndarray, ...]:
    """Per chunk and micro-batch, the duration, compute, exposed EP and expert seconds of
    the chunk's MoE layers summed: forward, backward and re-run forward ``[4, chunk,
    micro-batch]`` (fields :data:`D`, :data:`C`, :data:`X`, :data:`E`), and the W seconds
    ``[chunk, micro-batch]`` (none for frozen experts: LoRA defers no expert weight
    gradient)."""
    table = moe.table
    per_draw = np.concatenate([moe.stacked(False)[_PHASE_FIELDS],
                               moe.stacked(True)[_PHASE_FIELDS],
                               moe.stacked("redo")[_PHASE_FIELDS]])  # [fwd, bwd, re-run 4, K]
    rows = [[table.layer_row[x[0]] for x in ch.layers] for ch in chunks]
    for r in rows:
        assert r == list(range(r[0], r[0] + len(r))) if r else True, \
            "a chunk's MoE layers are consecutive"
    if table.entry.shape[1] < 2:
        mf, mb, mr, mw = _chunk_sums_rows(per_draw, table.entry, chunks, rows)
        return mf, mb, mr, np.zeros_like(mw) if moe.frozen else mw
    # slot k of chunk i: the draw its k-th MoE layer uses per micro-batch, or a zero column
    zero = per_draw.shape[1]
    per_draw = np.concatenate([per_draw, np.zeros((per_draw.shape[0], 1))], axis=1)
    entry = np.concatenate([table.entry, np.full((1, table.entry.shape[1]), zero)])
    none = table.entry.shape[0]  # the row of ``entry`` that reads the zero column

    def sums(g: np.ndarray, keep: int | None, which: list[int]) -> np.ndarray:
        """[fields, K + 1] -> [fields, chunk of ``which``, mb]"""
        out = np.zeros((g.shape[0], len(which), entry.shape[1]))
        for k in range(max((len(rows[i]) for i in which), default=0)):
            slot = [rows[i][k] if k < len(rows[i]) and (keep is None or
                                                        chunks[i].layers[k][keep]) else none
                    for i in which]
            term = np.take(g, entry[slot], axis=1)
            out = term if k == 0 else out + term
        return out

    both = sums(per_draw, None, list(range(len(chunks))))
    mf, mb, mr = both[:4], both[4:8], both[8:]
    # a chunk whose layers all re-run (all count in W) has the sums above; only the others
    # (the MTP layer's chunk) are summed again without the layers left out
    rerun = [i for i, ch in enumerate(chunks) if not all(x[1] for x in ch.layers)]
    if rerun:
        mr = mr.copy()
        mr[:, rerun] = sums(per_draw[8:], 1, rerun)
    counted = [i for i, ch in enumerate(chunks) if not all(x[2] for x in ch.layers)]
    mw = mb[E]
    if counted:
        mw = mw.copy()
        mw[counted] = sums(per_draw[4 + E:5 + E], 2, counted)[0]
    if moe.frozen:  # frozen experts (LoRA) have no weight gradient to defer
        return mf, mb, mr, np.zeros_like(mw)
    return mf, mb, mr, mw / 2


def _chunk_sums_rows(per_draw: np.ndarray, entry: np.ndarray, chunks: list[ChunkBase],
                     rows: list[list[int]]) -> tuple[np.ndarray, ...]:
    """:func:`chunk_sums` for one micro-batch, where ``np.sum`` adds along the layers
    (pairwise from 8 on) rather than one layer after the other: the sums as it gives them."""
    n = entry.shape[0]
    span = np.zeros((len(chunks), 2), dtype=np.int64)  # [lo, hi) rows of each chunk
    rerun, counted = np.zeros(n), np.zeros(n)
    for i, (ch, r) in enumerate(zip(chunks, rows, strict=True)):
        if r:
            span[i] = r[0], r[-1] + 1
        for row, (_, again, in_w) in zip(r, ch.layers, strict=True):
            rerun[row], counted[row] = again, in_w
    parts = per_draw[:, entry]  # [12, layer, micro-batch]

    def sums(g: np.ndarray) -> np.ndarray:  # [fields, layer, mb] -> [fields, chunk, mb]
        out = np.zeros((g.shape[0], len(chunks), g.shape[2]))
        for i, (lo, hi) in enumerate(span.tolist()):
            if hi > lo:
                np.sum(g[:, lo:hi], axis=1, out=out[:, i])
        return out

    both = sums(parts)
    mf, mb = both[:4], both[4:8]
    mr = both[8:] if rerun.all() else sums(parts[8:] * rerun[:, None])
    mw = mb[E] if counted.all() else sums(parts[4 + E:5 + E] * counted[:, None])[0]
    return mf, mb, mr, mw / 2


def stage_draw_uses(moe: MoECost, chunks: list[ChunkBase], runs: np.ndarray,
                    stages: int, rerun_only: bool = False) -> np.ndarray:
    """How often each stage's forward (and backward) uses each pool draw, ``[stage, K]``:
    one count per (MoE layer of a chunk, micro-batch the chunk runs: ``runs[chunk, mb]``).
    Counted per chunk, not per layer: DualPipe holds every layer twice, once per
    direction, on two stages. ``rerun_only``: of the layers whose forward re-runs in the
    backward."""
    table = moe.table
    k = len(table.rows)
    picked = [[x for x in ch.layers if x[1] or not rerun_only] for ch in chunks]
    rows = [table.layer_row[x[0]] for layers in picked for x in layers]
    chunk = np.repeat(np.arange(len(chunks)), [len(layers) for layers in picked])
    stage = np.array([ch.s for ch in chunks], dtype=np.int64)[chunk]
    keys = (stage[:, None] * k + table.entry[rows])[runs[chunk]]
    return np.bincount(keys, minlength=stages * k).reshape(stages, k).astype(float)


def add_moe_parts(moe: MoECost, chunks: list[ChunkBase], tables: tuple[np.ndarray, ...],
                  totals: list[dict[str, float]] | None, ep_totals: list[dict[str, float]],
                  phases: dict[tuple[str, int, int], Phase] | None) -> None:
    """Fill the engine's ``(fwd, bwd, wgrad, fwd_ep, bwd_ep)`` ``[s, c, mb]`` tables, the
    stage totals and the EP breakdown (forward and backward parts of every layer and
    micro-batch) for ``chunks``; with ``phases``, also each chunk's first-micro-batch
    phases (no op timelines). ``totals`` None: the tables only (the search's bound reads
    nothing else). Numpy over chunks and micro-batches."""
    mf, mb, mr, mw = chunk_sums(moe, chunks)
    stage = np.array([ch.s for ch in chunks])
    sc = (stage, np.array([ch.c for ch in chunks]))  # each (stage, chunk) once
    runs = np.zeros(mw.shape, dtype=bool)  # [chunk, mb]: the micro-batches it runs
    for i, ch in enumerate(chunks):
        runs[i, slice(None) if len(ch.mbs) == runs.shape[1] else ch.mbs] = True

    def base(get) -> np.ndarray:
        return _per_chunk(chunks, get)

    dur_f = base(lambda ch: ch.f.duration) + mf[D]
    dur_b = base(lambda ch: ch.b.duration) + mb[D] + mr[D]
    ep_f = base(lambda ch: ch.f.exposed.get("ep", 0.0)) + mf[X]
    ep_b = base(lambda ch: ch.b.exposed.get("ep", 0.0)) + mb[X] + mr[X]
    wg = np.minimum(base(lambda ch: ch.wg) + mw, dur_b)
    for table, value in zip(tables, (dur_f, dur_b, wg, ep_f, ep_b), strict=True):
        table[sc] = np.where(runs, value, 0.0)
    if totals is not None:
        _add_totals(moe, chunks, runs, (mf, mb, mr), (ep_f, ep_b), totals, ep_totals)
    if phases is not None:
        at = (slice(None), np.arange(len(chunks)), np.array([ch.mbs[0] for ch in chunks]))
        fwd, bwd = mf[at].T.tolist(), (mb[at] + mr[at]).T.tolist()  # [chunk, field]
        for ch, f, b in zip(chunks, fwd, bwd, strict=True):
            phases[("F", ch.s, ch.c)] = _first(ch.f, f)
            phases[("B", ch.s, ch.c)] = _first(ch.b, b)


def _add_totals(moe: MoECost, chunks: list[ChunkBase], runs: np.ndarray,
                sums: tuple[np.ndarray, ...], eps: tuple[np.ndarray, np.ndarray],
                totals: list[dict[str, float]], ep_totals: list[dict[str, float]]) -> None:
    """Stage totals per axis and the EP breakdown of :func:`add_moe_parts` (seconds)."""
    mf, mb, mr = sums
    ep_f, ep_b = eps
    stage = np.array([ch.s for ch in chunks])

    def base(get) -> np.ndarray:
        return _per_chunk(chunks, get)

    per_chunk = {
        "compute": base(lambda ch: ch.f.compute + ch.b.compute) + mf[C] + mb[C] + mr[C],
        "tp": base(lambda ch: ch.f.exposed.get("tp", 0.0) + ch.b.exposed.get("tp", 0.0)),
        "cp": base(lambda ch: ch.f.exposed.get("cp", 0.0) + ch.b.exposed.get("cp", 0.0)),
        "ep": ep_f + ep_b}
    for axis, value in per_chunk.items():
        chunk_total = (np.broadcast_to(value, runs.shape) * runs).sum(axis=1)
        for s, v in zip(stage.tolist(), chunk_total.tolist(), strict=True):
            totals[s][axis] += v
    parts = (moe.stacked(False) + moe.stacked(True))[_EP_FIELDS]  # [key, K]
    per_stage = stage_draw_uses(moe, chunks, runs, len(totals)) @ parts.T  # [stage, key]
    # forwards re-run in the backward (recompute) are in the phases: count them too
    if any(x[1] for ch in chunks for x in ch.layers):
        per_stage = per_stage + stage_draw_uses(moe, chunks, runs, len(totals), rerun_only=True) \
            @ moe.stacked("redo")[_EP_FIELDS].T
    for s in sorted(set(stage.tolist())):
        for k, v in zip(EP_KEYS, per_stage[s].tolist(), strict=True):
            ep_totals[s][k] = ep_totals[s].get(k, 0.0) + v


def _per_chunk(chunks: list[ChunkBase], get) -> np.ndarray:
    """``get(chunk)`` of every chunk as a column ``[chunk, 1]``."""
    return np.array([get(ch) for ch in chunks])[:, None]


def _first(base: Phase, extra: list[float]) -> Phase:
    """The first micro-batch's phase: ``base`` plus its MoE part ``extra`` (D, C, X, E)."""
    exposed = dict(base.exposed)
    exposed["ep"] = exposed.get("ep", 0.0) + extra[X]
    return Phase(duration=base.duration + extra[D], compute=base.compute + extra[C],
                 exposed=exposed, flops=base.flops, model_flops=base.model_flops)
