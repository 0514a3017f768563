"""Per-GPU memory of every pipeline stage, with a breakdown, and whether it fits.

Bytes per parameter of the model states (weights, Transformer Engine's FP8 copies,
gradients, optimizer) come from :mod:`.states`, with their sources; activations from
:mod:`.activations`; communication buffers are the explicit per-layer staging buffers
named in :func:`comm_buffer_bytes`, plus Megatron-FSDP's two unsharded units
(:func:`fsdp_unit_bytes`). Sharding (ZeRO, Rajbhandari et al. 2020, Section 5 and
Figure 1): the optimizer state over the data x context ranks with the distributed
optimizer or any Megatron-FSDP strategy but ``no_shard``, the gradients too under
``optim_grads``, the weights too under ``optim_grads_params`` (expert states over
expert-DP). With ``num_distributed_optimizer_instances`` = k each of those states is
sharded over the 1/k of the ranks in one instance and replicated k times (Megatron-Core's
partial distributed optimizer; Megatron-FSDP's HSDP), except the optimizer state under
HFSDP (``outer_dp_sharding_strategy: optim``), which is sharded over all of them. What
the framework holds outside the model's tensors (CUDA context, NCCL communicator buffers,
workspaces, allocator slack) is the topology's ``gpu.framework_memory_GB`` allowance, and
the capacity is what CUDA exposes (``gpu.hbm_usable_MiB``: 81,559 MiB on an "80 GB" H100).

A plan fits when its worst stage's total plus ``training.memory_headroom_GB`` is within
the capacity. Activations offloaded to the host (``cpu_offloading``) are reported per
stage (``offloaded``) but do not count against HBM.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..config.stacks import run_stack
from ..config.workload import Workload
from ..errors import ConfigError
from ..hardware import Topology
from ..moe import is_moe_layer
from ..precision import DTYPE_BYTES
from ..schedules import schedule_of
from ..shape.params import expert_data_parallel, layer_params, stage_layer_indices, stage_tables
from ..shape.partition import Partition
from ..shape.plan_shape import PlanShape, local_seq, plan_shape
from .activations import BYTES_16, moe_load
from .stage_activations import stage_activations
from .states import (
    FP8_BYTES,
    WEIGHT_BYTES,
    fp8_copy_bytes,
    grad_bytes,
    optimizer_bytes,
    torch_fsdp_holds_main_only,
    weight_bytes,
)

GB = 1e9
COMPONENTS = ("parameters", "fp8_weight_copies", "gradients", "optimizer", "activations",
              "comm_buffers", "framework")


@dataclass(frozen=True)
class StageMemory:
    """Memory of one GPU of pipeline stage ``stage``; every field in bytes."""

    stage: int
    parameters: float
    fp8_weight_copies: float
    gradients: float
    optimizer: float
    activations: float
    comm_buffers: float
    framework: float
    offloaded: float = 0.0  # activations in host memory (not counted in total)

    @property
    def total(self) -> float:
        return sum(getattr(self, c) for c in COMPONENTS)

    def breakdown_GB(self) -> dict[str, float]:
        """Each component in decimal GB (1e9 bytes); the total is not included."""
        return {c: getattr(self, c) / GB for c in COMPONENTS}

    @property
    def biggest(self) -> str:
        return max(COMPONENTS, key=lambda c: getattr(self, c))


@dataclass(frozen=True)
class MemoryReport:
    """Every stage's memory against the GPU's capacity (bytes)."""

    stages: tuple[StageMemory, ...]
    capacity_bytes: float
    headroom_bytes: float = 0.0  # margin the plan must leave free (training.memory_headroom_GB)

    @cached_property  # frozen: computed once (a summary reads it several times)
    def worst(self) -> StageMemory:
        return max(self.stages, key=lambda st: st.total)  # first stage wins ties

    @property
    def margin_bytes(self) -> float:
        """Capacity left on the worst stage after the demanded headroom (< 0: over)."""
        return self.capacity_bytes - self.headroom_bytes - self.worst.total

    @property
    def fits(self) -> bool:
        return self.margin_bytes >= 0

    @property
    def utilization(self) -> float:
        """Worst stage's total over the capacity (1.0 = full)."""
        return self.worst.total / self.capacity_bytes

    def stage_fits(self, st: StageMemory) -> bool:
        return st.total + self.headroom_bytes <= self.capacity_bytes

    @property
    def fits_in_memory(self) -> bool:
        return self.fits

    @property
    def memory_per_gpu_GB(self) -> float:
        """Worst stage's total, decimal GB."""
        return self.worst.total / GB

    @property
    def memory_breakdown_GB(self) -> dict[str, float]:
        return self.worst.breakdown_GB()

    def explain(self) -> str:
        """One sentence: worst stage, need vs capacity, margin, biggest component."""
        st = self.worst
        need = st.total / GB
        margin = self.margin_bytes / GB
        head = f" with {self.headroom_bytes / GB:g} GB headroom" if self.headroom_bytes else ""
        free = f"{-margin:.1f} GB over{head}" if margin < 0 else f"{margin:.1f} GB free{head}"
        big = st.biggest
        return (f"stage {st.stage} needs {need:.1f} GB of {capacity_text(self.capacity_bytes)}"
                f" ({free}); "
                f"biggest: {big} {getattr(st, big) / GB:.1f} GB")


def capacity_text(capacity_bytes: float) -> str:
    """A GPU's capacity as users know it: decimal GB *usable* (what CUDA exposes, not the
    datasheet's size) and the GiB that nvidia-smi's MiB make: ``85.52 GB usable = 79.65
    GiB`` for an "80 GB" H100 (81,559 MiB)."""
    return f"{capacity_bytes / 1e9:.4g} GB usable = {capacity_bytes / 2**30:.2f} GiB"


def comm_buffer_bytes(w: Workload, expert_load_factor: float | None = None) -> float:
    """Explicit communication staging buffers on one GPU, bytes.

    * TP with SP: the all-gathered layer input and the reduce-scatter input,
      ``2 * 2*s*b*h`` (Korthikanti 2022 Section 4.2.2; Megatron's global buffer);
    * PP: send + recv of one boundary activation, ``2 * 2*s*b*h/t_sp``,
      times the schedule's :meth:`~simulator.schedules.Schedule.p2p_buffers`;
    * CP (ring attention): send + recv of K and V, ``2*2*2*s*b*g*d/t``;
    * EP: the all-to-all send buffer of this GPU's routed tokens.
    ``s`` is the local sequence (``seq_length/cp``).
    """
    m, par = w.model, w.parallelism
    s, b, h, t = local_seq(w), w.training.micro_batch_size, m.hidden_size, par.tensor
    sp_div = t if par.sequence_parallel else 1
    total = 0.0
    if t > 1 and par.sequence_parallel:
        total += 2 * BYTES_16 * s * b * h
    if par.pipeline > 1:
        per = 2 * BYTES_16 * s * b * h / sp_div
        total += per * schedule_of(par).p2p_buffers()
    if par.context > 1:
        total += 2 * 2 * BYTES_16 * s * b * m.groups * m.head_dim / t
    if par.expert > 1 and m.moe is not None:
        routed = s * b * m.moe.router_topk * moe_load(w, expert_load_factor) / t
        total += routed * BYTES_16 * h * par.etp
    return total


def fsdp_unit_bytes(w: Workload, staged_params: float,
                    grad_params: float | None = None) -> float:
    """Megatron-FSDP's unsharded staging of two units of ``staged_params`` parameters in all
    (:func:`fsdp_staged_params`), bytes: with sharded weights (ZeRO-3) the gathered weights
    of the unit in use and of the one prefetched, with their FP8 casts in FP8 training;
    with sharded gradients (ZeRO-2/3) the full gradients of the unit being reduce-scattered
    and of the one being produced (Megatron-Core ``fsdp_double_buffer``). Zero without
    them. ``grad_params``: the parameters whose gradients are staged where they differ
    from the weights held (a stack that keeps the forward's weights, below)."""
    tr = w.training
    out = 0.0
    if tr.params_sharded:
        prec = tr.precision_type
        out += staged_params * (weight_bytes(tr) + (prec.element_bytes if prec.scaled
                                                    and not tr.scaled_params else 0.0))
    if tr.grads_sharded:
        out += (staged_params if grad_params is None else grad_params) * grad_bytes(tr)
    return out


def fsdp_staged_params(w: Workload, partition: Partition, stage: int,
                       gradients: bool = False) -> float:
    """Parameters of the two FSDP units a GPU of ``stage`` holds unsharded at its peak: its
    largest decoder layer and the larger of another such layer and the embedding or output
    table next to it (Megatron-FSDP's units are the decoder layers, and the embedding and
    the output layer one unit each; ``V_pad*h/t`` parameters). The traffic spreads a
    chunk's bytes evenly over its units (:mod:`simulator.workload.fsdp`), which is the
    same total; the memory peak needs the largest pair.

    Other stacks (``training.stack``, stacks/*.yaml ``fsdp``): the unit in use plus
    ``prefetch_depth`` prefetched ones, each ``1/units_per_layer`` of a layer (DeepSpeed
    ZeRO-3 gathers per submodule); without ``reshard_after_forward`` every unit gathered in
    the forward stays until its backward, so the whole stage's weights are held unsharded
    (expert weights only where expert data parallelism shards them: with one expert-DP
    rank they are the GPU's own and never gathered, as NeMo AutoModel leaves EP-sharded
    experts out of FSDP), while its gradients (``gradients``) are still produced and
    reduce-scattered a unit at a time, except under a stack that syncs once per pipeline
    schedule (``sync_once_per_schedule`` with pipeline parallelism: the stage's gradients
    accumulate unsharded until its last backward)."""
    ids = stage_layer_indices(partition, stage)
    moe = w.model.moe
    stack = run_stack(w.training)
    tables = stage_tables(w, partition, stage)
    whole = (not stack.reshards(w.parallelism.pipeline) and not gradients) or (
        gradients and stack.sync_once_per_schedule and w.parallelism.pipeline > 1)
    if whole:
        sharded = moe is not None and expert_data_parallel(w) > 1
        return sum(lp.dense + (lp.expert if sharded else 0.0) for lp in
                   (layer_params(w, moe is not None and is_moe_layer(moe, i)) for i in ids)) \
            + sum(tables)
    kinds = {moe is not None and is_moe_layer(moe, i) for i in ids}  # dense and/or MoE
    largest = max((layer_params(w, routed).total for routed in kinds), default=0.0)
    largest /= stack.fsdp_units_per_layer
    if not ids:  # a stage of tables only: both are staged
        return sum(sorted(tables)[-2:])
    return largest + stack.prefetch_depth * max([largest, *tables])


def _bf16_params(w: Workload, partition: Partition, stage: int) -> float:
    """Parameters on one GPU of ``stage`` in its 16-bit decoder layers
    (``training.first_last_layers_bf16``; dense models only)."""
    if not w.training.first_last_layers_bf16:
        return 0.0
    n = sum(w.bf16_layer(x) for x in stage_layer_indices(partition, stage))
    return n * layer_params(w, False).dense if n else 0.0


def _unscaled_tables(w: Workload, partition: Partition, stage: int) -> float:
    """Parameters on one GPU of ``stage``'s embedding / output tables that stay 16-bit under a
    scaled precision: Megatron-Core's VocabParallelEmbedding and output ColumnParallelLinear
    are not Transformer Engine modules, so FP8 / NVFP4 weights (``fp8_param_gather``) and TE's
    cached copies exist for the decoder layers' linears only; the output table is scaled only
    where the stack quantises it (stacks/*.yaml ``fp8.output_layer_fp8``: torchao converts
    the LM head)."""
    if not w.training.precision_type.scaled:
        return 0.0
    output_scaled = run_stack(w.training).fp8_output_layer is True
    return sum(stage_tables(w, partition, stage, output=not output_scaled))


def _trainable_share(sp) -> float:
    """Share of a stage's parameters that train (1 but under LoRA)."""
    return sp.trainable.total / sp.total if sp.total else 1.0


def _split(per_param: float, sp, shard: tuple[int, int]) -> float:
    """Bytes of a state of ``per_param`` bytes per parameter, its dense and expert parts
    split ``shard`` ways."""
    return per_param * (sp.dense / shard[0] + sp.expert / shard[1])


def estimate_memory(w: Workload, topo: Topology, partition: Partition | PlanShape | None = None,
                    expert_load_factor: float | None = None) -> MemoryReport:
    """Per-GPU memory of every pipeline stage of ``w`` on ``topo``'s GPU (bytes).

    ``partition``: the plan's shape (:class:`~simulator.shape.PlanShape`) or its layer
    split, if the caller has them; the stage parameters, expert-DP and the shards of
    each state are read from the shape. ``expert_load_factor``: routed tokens on the
    busiest EP rank over the uniform share (>= 1 under skew); ignored when the model
    sets a capacity factor. None: a dropless plan's hot rank at the 99th percentile of
    the router's draws (:mod:`.hot_expert`), 1.0 under uniform routing.
    """
    par, tr = w.parallelism, w.training
    if w.num_microbatches < 1:
        raise ConfigError("training.global_batch_size", tr.global_batch_size,
                          f"must be at least micro_batch_size*data "
                          f"({tr.micro_batch_size * par.data})")
    load = moe_load(w, expert_load_factor)
    shape = partition if isinstance(partition, PlanShape) else plan_shape(w, partition)
    partition = shape.partition
    o_shard, g_shard, p_shard = shape.optimizer_shards, shape.grad_shards, shape.param_shards
    weights = weight_bytes(tr)
    copies = fp8_copy_bytes(tr, topo.gpu.fp8_any_layout,
                            run_stack(tr).fp8_weight_transpose_in_backward)
    if tr.params_sharded:  # Megatron-FSDP caches at most the gathered weights' FP8 transposes
        copies = FP8_BYTES if tr.keep_fp8_transpose_cache and copies else 0.0
    grads, optim = grad_bytes(tr), optimizer_bytes(tr)
    main_only = torch_fsdp_holds_main_only(tr, run_stack(tr).fsdp_impl)
    if main_only:  # the sharded parameter is the main copy; its gradient takes its dtype
        grads = DTYPE_BYTES[tr.main_params_dtype]
    comm = comm_buffer_bytes(w, expert_load_factor)
    stages = []
    for stage in range(partition.num_stages):
        sp = shape.params[stage]
        acts = stage_activations(w, partition, stage, load)
        # 16-bit weights without scaled copies beside scaled ones: the layers kept in bf16
        # (first_last_layers_bf16) and the embedding / output tables (module docstring)
        b16 = _bf16_params(w, partition, stage) + _unscaled_tables(w, partition, stage)
        stages.append(StageMemory(
            stage=stage,
            # under PyTorch FSDP only the frozen weights hold a 16-bit shard of their own
            parameters=_split(weights, sp.frozen_part if main_only else sp, p_shard)
            + (WEIGHT_BYTES - weights) * b16 / p_shard[0],
            fp8_weight_copies=copies * (sp.total - b16),  # of the gathered (whole) weights
            # frozen weights (LoRA's base) have neither gradients nor optimizer states
            gradients=_split(grads, sp.trainable, g_shard),
            optimizer=_split(optim, sp.trainable, o_shard),
            activations=acts.device,
            comm_buffers=comm + (fsdp_unit_bytes(w, fsdp_staged_params(w, partition, stage),
                                                 fsdp_staged_params(w, partition, stage, True)
                                                 * _trainable_share(sp))
                                 if tr.grads_sharded else 0.0),
            framework=topo.gpu.framework_memory_bytes,
            offloaded=acts.host,
        ))
    return MemoryReport(stages=tuple(stages), capacity_bytes=topo.gpu.hbm_bytes,
                        headroom_bytes=tr.memory_headroom_GB * GB)


__all__ = ["COMPONENTS", "MemoryReport", "StageMemory", "estimate_memory"]
