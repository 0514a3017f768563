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
    cache: dict[tuple[bool, str | None], float] = {}

    def per_layer(layer: int, mode: str | None = None) -> float:
        key = (is_moe_layer(w, layer), mode)
        if key not in cache:
            cache[key] = activation_bytes_per_layer(w, key[0], load, mode)
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
    if stage == partition.num_stages - 1:
        par = w.parallelism
        held = schedule_of(par).outputs_held(par.pipeline, w.num_microbatches, par.vp)
        device += held * output_activation_bytes(w)
        device += logits_transient_bytes(w)
    return StageActivations(device=device, host=in_flight * host)
