"""Activations one GPU of a pipeline stage holds at its peak, and what went to the host.

Per micro-batch in flight (:func:`~.activations.microbatches_in_flight`), every layer of
every model chunk on the stage keeps :func:`~.activations.activation_bytes_per_layer`,
except where Megatron-Core's full recompute or activation offloading changes it:

* ``full`` / ``uniform`` with ``recompute_num_layers = n``: a chunk's layers are
  checkpointed in groups of ``n``; each group keeps its 16-bit input (``2*s*b*h/t_sp``)
  and, during the backward, one group's ``n`` layers are re-run and held whole at once
  (the recompute working set, counted once per stage);
* ``full`` / ``block`` with ``n``: the first ``n`` layers of each chunk keep only their
  input, the others everything; the working set is one layer
  (``megatron/core/transformer/transformer_block.py``, ``_checkpointed_forward``);
* ``cpu_offloading`` with ``cpu_offloading_num_layers = k`` (Megatron requires PP = 1):
  the first ``k`` layers' activations are copied to host memory during the forward and
  brought back for the backward; one layer's worth stays on the GPU as the transfer
  buffer. The host bytes are reported, not counted against HBM.

The first stage also holds the embedding's dropout mask per micro-batch in flight; the
last the output layer's inputs and fp32 logits for as many micro-batches as the
schedule says it holds (:meth:`~simulator.schedules.Schedule.outputs_held`: one, all
under GPipe), plus the 16-bit logits beside them while the loss runs
(:func:`~.activations.logits_transient_bytes`). Korthikanti et al. 2022, Sections 4.2-4.3 and 5.

Multi-token prediction (``mtp_num_layers``): the stage that runs the MTP layers keeps, per
MTP layer and micro-batch it holds, one layer of the last layer's kind and the two inputs of
its projection (the hidden states and the shifted embedding); under full recompute only
those two inputs (Megatron-Core ``MultiTokenPredictionLayer._checkpointed_forward``
checkpoints the whole layer). Beside the loss it holds them for the micro-batches whose head
inputs it holds (``outputs_held``), in a standalone stage for its in-flight count. The loss
stage holds each MTP head's logits as it holds the main head's (``process_mtp_loss`` runs
there with the shared output layer).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.workload import Workload
from ..schedules import schedule_of
from ..shape.params import stage_layer_indices
from ..shape.partition import Partition
from .activations import (
    activation_bytes_per_layer,
    embedding_activation_bytes,
    is_moe_layer,
    logits_transient_bytes,
    microbatches_in_flight,
    output_activation_bytes,
)


@dataclass(frozen=True)
class StageActivations:
    """Bytes on the GPU (``device``) and in host memory (``host``) at the stage's peak."""

    device: float
    host: float = 0.0


def _chunks(partition: Partition, stage: int) -> list[list[int]]:
    """Global layer ids of each model chunk of ``stage``, in chunk order."""
    ids = stage_layer_indices(partition, stage)
    out, i = [], 0
    for count in partition.layers[stage]:
        out.append(ids[i:i + count])
        i += count
    return out


def stage_activations(w: Workload, partition: Partition, stage: int,
                      load: float) -> StageActivations:
    """Activations held by one GPU of ``stage`` at its peak (bytes), see module docstring."""
    cache: dict[tuple[bool, bool, str | None], float] = {}
    # first_last_layers_bf16: those layers' saved inputs are 16-bit
    w16 = w.in_bf16() if w.training.first_last_layers_bf16 else w

    def per_layer(layer: int, mode: str | None = None) -> float:
        key = (is_moe_layer(w, layer), w.bf16_layer(layer), mode)
        if key not in cache:
            cache[key] = activation_bytes_per_layer(w16 if key[1] else w, key[0], load, mode)
        return cache[key]

    tr = w.training
    rc = tr.recompute_plan
    offload = tr.cpu_offloading_num_layers if tr.cpu_offloading else 0
    kept = host = working = 0.0
    for chunk in _chunks(partition, stage):
        for pos, layer in enumerate(chunk):
            if rc.full and rc.method == "uniform":
                if pos % rc.num_layers == 0:  # a group starts: its input, its working set
                    group = chunk[pos:pos + rc.num_layers]
                    working = max(working, sum(per_layer(x, "none") for x in group))
                    kept += per_layer(layer, "full")
            elif rc.full and pos < rc.num_layers:  # block: first n layers recomputed
                working = max(working, per_layer(layer, "none"))
                kept += per_layer(layer, "full")
            elif layer < offload:
                host += per_layer(layer, "none" if rc.full else None)
            else:
                kept += per_layer(layer, "none" if rc.full else None)
    in_flight = microbatches_in_flight(w, stage)
    buffer = max((per_layer(x) for x in range(min(offload, 1))), default=0.0)
    device = in_flight * kept + working + buffer
    if stage == 0:
        device += in_flight * embedding_activation_bytes(w)
    par = w.parallelism
    held = schedule_of(par).outputs_held(par.pipeline, w.num_microbatches, par.vp)
    mtp = w.model.mtp_num_layers or 0
    if mtp and stage == _mtp_stage(partition):
        last_kind = w.model.num_layers - 1  # an MTP layer is of the last layer's kind
        if rc.full:  # checkpointed whole: its two inputs (hidden states, shifted embedding)
            layer = 2 * per_layer(last_kind, "full")
        else:  # the layer's own activations, and the two normed inputs of its projection
            layer = per_layer(last_kind) + 2 * per_layer(last_kind, "full")
        # beside the loss the MTP layers live as long as the head's inputs (the schedule's
        # outputs held); in a stage of their own, as long as that stage's chunks
        device += (held if partition.mtp_chunk is None else in_flight) * mtp * layer
    if stage == partition.num_stages - 1:
        device += held * (1 + mtp) * output_activation_bytes(w)  # each MTP head's logits too
        device += logits_transient_bytes(w)
    return StageActivations(device=device, host=in_flight * host)


def _mtp_stage(partition: Partition) -> int:
    """The stage whose chunk runs the MTP layers: the last, or a layout's standalone one."""
    if partition.mtp_chunk is None:
        return partition.num_stages - 1
    return next(s for s, row in enumerate(partition.place) if partition.mtp_chunk in row)
