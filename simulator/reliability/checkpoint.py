"""Checkpoint size and the time to write and read it.

A Megatron distributed checkpoint holds, per unique parameter, the bf16 weight (2 B), the
fp32 master copy (4 B) and Adam's two fp32 moments (8 B): 14 bytes (Rajbhandari et al.
2020, ZeRO, Sec. 3.1: 16 B of model state per parameter, of which the 2 B fp16 gradient is
not saved). Another optimizer (``training.optimizer``) saves its own states: 2 + 4 + 4 B a
fp32 state (:func:`bytes_per_param`: 10 for Lion or SGD with momentum, 6 for plain SGD).
Unique parameters come from the per-GPU counts of
:func:`simulator.shape.params.stage_params`: a stage's dense parameters are sharded
over TP (and replicated over DP x CP), its expert parameters over EP x expert-TP.
For Llama 3 405B that is 5.7 TB, 346 MB per GPU on 16,384 GPUs, inside the 1 MB - 4 GB per
GPU the Llama 3 paper reports (Sec. 3.3.1).

Every GPU writes its shard in parallel, so a write runs at
``min(nodes * node_write_GBps, aggregate_write_GBps)`` (the nodes' storage links or the
file system, whichever is smaller); a restart reads the same bytes at the read figures.
An asynchronous save (Megatron-LM ``--async-save``) blocks training only for the copy of
each GPU's shard to host memory (``snapshot_GBps_per_gpu``) and writes in the background.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import TopologyConfig, Workload
from ..memory.states import optimizer_states
from ..shape.params import StageParams

GB = 1e9


def bytes_per_param(w: Workload) -> float:
    """Checkpoint bytes per unique parameter: bf16 weight, fp32 master and the optimizer's
    fp32 states (14 for Adam, the module docstring)."""
    return 2.0 + 4.0 + 4.0 * len(optimizer_states(w.training))


def unique_parameters(w: Workload, stages: list[StageParams]) -> float:
    """Parameters of one model replica, from the per-GPU counts of every stage."""
    p = w.parallelism
    return sum(s.dense * p.tensor + s.expert * p.expert * p.etp for s in stages)


@dataclass(frozen=True)
class Checkpoint:
    """Size (bytes) and times (s) of one checkpoint."""

    bytes: float
    write_s: float
    read_s: float
    blocking_s: float  # what training waits for: the write, or the snapshot if async

    @classmethod
    def of(cls, w: Workload, t: TopologyConfig, stages: list[StageParams],
           async_save: bool) -> Checkpoint:
        size = unique_parameters(w, stages) * bytes_per_param(w)
        n = w.parallelism.num_gpus
        nodes = -(-n // (t.reliability.gpus_per_node or t.tiers[0].size))
        st = t.storage
        write = _time(size, nodes, st.node_write_GBps, st.aggregate_write_GBps)
        read = _time(size, nodes, st.node_read_GBps, st.aggregate_read_GBps)
        block = write
        if async_save and st.snapshot_GBps_per_gpu is not None:
            block = size / n / (st.snapshot_GBps_per_gpu * GB)
        return cls(bytes=size, write_s=write, read_s=read, blocking_s=block)


def _time(size: float, nodes: int, per_node: float | None, aggregate: float | None) -> float:
    """Seconds to move ``size`` bytes: the slower of the node links and the file system."""
    rates = [r * GB for r in ((per_node * nodes) if per_node else None, aggregate) if r]
    return size / min(rates) if rates else 0.0
