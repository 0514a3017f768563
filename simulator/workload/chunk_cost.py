"""Cost one pipeline chunk: the forward and backward phases of its layers.

A chunk (stage ``s``, model chunk ``c``) runs, in order: the embedding on the chunk
holding global chunk 0, its decoder layers, the multi-token-prediction modules and the
output layer + loss on the last chunk. Its forward phase is the sum of those blocks'
forward phases; its backward the mirror, with each layer's recomputed forward in front
of its backward where the recompute plan says so (full recompute goes by position in
the chunk: the first ``recompute_num_layers`` re-run, the rest keep their activations).

Dense layers are identical, so one is costed and repeated; a chunk without MoE layers
or offloading depends only on its ends and layer count (:meth:`ChunkCoster.chunk_kind`),
so chunks alike are costed once per plan. An MoE layer is its base ops (attention,
shared expert) plus a routed-expert part (:mod:`.moe.layer`) that depends on the
router's draw for that layer and micro-batch. In collect mode the chunk is costed
without those parts, which :mod:`.moe.plan` adds for every micro-batch at once.

Also returned per chunk: the W seconds (weight-gradient GEMMs) that B/W-split
schedules run apart from the backward. CPU offloading adds the compute stream's wait
on the host link per offloaded layer. Seconds throughout.
"""

from __future__ import annotations

from functools import cached_property

from ..config.workload import Workload
from ..errors import ConfigError
from ..hardware import Topology
from ..memory.activations import activation_bytes_per_layer
from ..moe import is_moe_layer
from ..shape.lora import enabled as lora_enabled
from ..shape.plan_shape import plan_shape
from .context import make_attention
from .cost import CostContext, Phase, TimedOp, cost_ops
from .layout import group_layout
from .moe.layer import MoECost
from .moe.part import MoEPart, moe_phase
from .ops import (
    Op,
    backward_of,
    dims,
    embedding_forward,
    layer_forward,
    output_forward,
    recompute_ops,
)
from .wgrad import wgrad_time


class ChunkCoster:
    """Phases of one workload's pipeline chunks on one topology (module docstring).

    Built once per plan: the costs every chunk shares (embedding, output, the dense
    layer, an MoE layer's base ops, offload waits) are taken here or on first use;
    :meth:`chunk` then assembles one chunk, :meth:`collect` the chunks alike at once.
    """

    def __init__(self, w: Workload, topo: Topology):
        p, tr = w.parallelism, w.training
        self.w, self.topo = w, topo
        self.shape = plan_shape(w)
        self.part = self.shape.partition
        self.groups = group_layout(w, topo)
        x = dims(w)
        self.ctx = CostContext(topo=topo, groups=self.groups, dtype=tr.precision,
                               tp_overlap=tr.tp_comm_overlap and p.sequence_parallel,
                               attention=make_attention(w, topo, self.groups, x),
                               async_grad_allreduce=tr.async_tensor_model_parallel_allreduce)
        shared = w.model.moe.shared_expert_ffn_hidden_size if w.model.moe else 0
        # an MoE layer's ops without the routed experts: built once, read three times below
        moe_fwd = layer_forward(w, shared) if w.model.moe else []
        moe_bwd = backward_of(moe_fwd)
        self.moe_base = (self._layer(shared, moe_layer=True, ops=(moe_fwd, moe_bwd))
                         if w.model.moe else None)
        self.moe_plain_bwd = cost_ops(moe_bwd, self.ctx) if w.model.moe else None
        # the routed part's host model sees the layer's own backward; a recomputed layer's
        # re-run forward + backward is one joint host / GPU period (moe_host
        # recompute_period), not a backward max plus a forward max (with which a faster
        # link that shortened the re-run lengthened the step)
        self.moe = (MoECost(w, topo, self.groups, x.T, (self.moe_base[0], self.moe_plain_bwd),
                            self.moe_base[1].duration) if w.model.moe else None)
        self.ep_parts: list[MoEPart] = []  # MoE parts of the last chunk() call
        self._collected: dict[tuple, tuple] = {}  # collect(): chunks alike
        self.rc = rc = tr.recompute_plan
        self.recompute_moe = rc.full or rc.has("moe")
        self.offload_layers = tr.cpu_offloading_num_layers if tr.cpu_offloading else 0
        self.offload = self._offload_waits(topo) if self.offload_layers else None
        emb, out = embedding_forward(w), output_forward(w)
        # the embedding's backward is its weight gradient (the token ids have none): a frozen
        # table (LoRA trains adapters only, simulator/workload/lora.py) runs no backward
        self.embed = (cost_ops(emb, self.ctx),
                      cost_ops([] if lora_enabled(w) else backward_of(emb), self.ctx))
        self.output = (cost_ops(out, self.ctx), cost_ops(backward_of(out), self.ctx))
        # W (weight-gradient GEMMs) of each kind of block, for B/W-split schedules
        self.w_moe_base = wgrad_time(moe_fwd, self.ctx) if self.moe else 0.0
        self.w_output = wgrad_time(out, self.ctx)

    # The dense layer is costed on first use: a model whose layers are all MoE (Mixtral)
    # never reads it, and a search builds thousands of such plans.
    @cached_property
    def _dense_ops(self) -> tuple[list[Op], list[Op]]:
        fwd = layer_forward(self.w)
        return fwd, backward_of(fwd)

    @cached_property
    def dense(self) -> tuple[Phase, Phase]:
        return self._layer(None, ops=self._dense_ops)

    @cached_property
    def bf16(self) -> ChunkCoster:
        """The coster of the run's 16-bit decoder layers (``training.first_last_layers_bf16``):
        the same plan in bf16, whose dense layer, plain backward and W this one reads."""
        return ChunkCoster(self.w.in_bf16(), self.topo)

    @cached_property
    def dense_plain_bwd(self) -> Phase:
        """Full recompute, block method: layers past recompute_num_layers keep their
        activations, so their backward re-runs nothing."""
        return cost_ops(self._dense_ops[1], self.ctx)

    @cached_property
    def w_dense(self) -> float:
        """W (weight-gradient GEMMs) of a dense layer, for B/W-split schedules."""
        return wgrad_time(self._dense_ops[0], self.ctx)

    def _layer(self, ffn: int | None, moe_layer: bool = False,
               ops: tuple[list[Op], list[Op]] | None = None) -> tuple[Phase, Phase]:
        """(forward, recompute + backward) of one layer; ``ops``: its forward and backward
        op lists when the caller has them already."""
        fwd, bwd = ops or (layer_forward(self.w, ffn), None)
        bwd = bwd if bwd is not None else backward_of(fwd)
        return (cost_ops(fwd, self.ctx),
                cost_ops(recompute_ops(self.w, fwd, moe_layer) + bwd, self.ctx))

    def _offload_waits(self, topo: Topology) -> tuple[Phase, Phase]:
        """Per offloaded layer, the time the compute stream waits on the host link.

        Megatron-Core's CPU offloading (Transformer Engine ``get_cpu_offload_context``)
        copies a layer's activations to the host on a side stream while the next layer
        computes, and back while the previous layer's backward runs: each copy of
        ``bytes / host_link`` seconds is hidden under one layer's forward (backward)
        and the rest stalls the compute stream. Units: seconds."""
        bw = topo.gpu.host_link_bandwidth
        if not bw:
            raise ConfigError("topology.gpu.host_link_GBps", None,
                              "is needed for training.cpu_offloading")
        copy = activation_bytes_per_layer(self.w) / bw
        out = []
        for name, hide in (("offload_d2h_wait", self.dense[0].duration),
                           ("offload_h2d_wait", self.dense[1].duration)):
            wait = max(0.0, copy - hide)
            out.append(Phase(duration=wait, compute=wait,
                             ops=[TimedOp(name, "compute", 0.0, wait, 0.0, 0.0)] if wait else []))
        return out[0], out[1]

    def _dense(self, f: Phase, b: Phase, redo: int, plain: int, ops: bool) -> None:
        """Append ``redo`` dense layers with recompute and ``plain`` without (none: nothing
        to add, so the dense layer need not be costed)."""
        if not redo + plain:
            return
        f.extend(self.dense[0], redo + plain, ops)
        b.extend(self.dense[1], redo, ops)
        if plain:
            b.extend(self.dense_plain_bwd, plain, ops)

    def chunk_kind(self, s: int, c: int) -> tuple | None:
        """A key under which :meth:`chunk` gives the same phases for every (stage, chunk)
        that has it: without MoE layers or offloading, a chunk's costs depend only on
        whether it holds the embedding / the output, on its layer count and on which of its
        layers run in 16-bit (recompute goes by position in the chunk). None where they
        may depend on more."""
        if self.moe is not None or self.offload_layers:
            return None
        ids = self.shape.layer_ids(s, c)
        return (self.shape.first(s, c), self.shape.last(s, c), self.shape.mtp(s, c),
                len(ids), tuple(self.w.bf16_layer(x) for x in ids))

    def collect(self, s: int, c: int, mb: int, first: bool, last: bool
                ) -> tuple[Phase, Phase, float, list[tuple[int, bool, bool]]]:
        """:meth:`chunk` in collect mode, and its MoE layers: the same phases (shared,
        read-only) for every chunk alike, i.e. with the same embedding / output, the same
        sequence of dense and MoE layers (recompute goes by position) and as many
        offloaded layers; only the MoE layer ids differ."""
        moe, ids = self.w.model.moe, self.shape.layer_ids(s, c)
        kinds = tuple(is_moe_layer(moe, layer) for layer in ids)
        mtp = self.shape.mtp(s, c)
        key = (first, last, mtp, kinds, sum(layer < self.offload_layers for layer in ids))
        hit = self._collected.get(key)
        if hit is None:
            layers: list[tuple[int, bool, bool]] = []
            f, b, wg = self.chunk(s, c, mb, first, last, ops=False, moe_layers=layers)
            hit = self._collected[key] = (f, b, wg, [x[1:] for x in layers])
        f, b, wg, flags = hit
        m = self.w.model
        moe_ids = [layer for layer, k in zip(ids, kinds, strict=True) if k]
        if mtp:
            moe_ids += [layer for layer in range(m.num_layers, m.num_layers + m.mtp_num_layers)
                        if is_moe_layer(moe, layer)]
        return f, b, wg, [(layer, *x) for layer, x in zip(moe_ids, flags, strict=True)]

    def chunk(self, s: int, c: int, mb: int, first: bool, last: bool, ops: bool,
              moe_layers: list[tuple[int, bool, bool]] | None = None):
        """(forward, backward, W seconds) of chunk c on stage s for micro-batch mb.

        With a ``moe_layers`` list (collect mode, ``mb`` unused): the chunk without its
        routed-expert parts, which :mod:`.moe.plan` adds for every micro-batch at once;
        each MoE layer is appended as ``(layer, forward re-run in backward, counted in
        W)`` and the W seconds are returned before the ``min`` with the backward."""
        w = self.w
        f, b = Phase(), Phase()
        self.ep_parts = []
        wg = self.w_output if last else 0.0
        if first:
            f.extend(self.embed[0], ops=ops)
        if last:
            b.extend(self.output[1], ops=ops)
        dense_run = plain_run = 0
        bf16_run = bf16_plain = 0  # 16-bit layers (first_last_layers_bf16; dense models only)
        for pos, layer in enumerate(self.shape.layer_ids(s, c)):
            redo = self.rc.layer_recomputed(pos) or not self.rc.full
            if self.moe is None and w.bf16_layer(layer):
                bf16_run += redo
                bf16_plain += not redo
                continue
            if self.moe is None or not is_moe_layer(w.model.moe, layer):
                dense_run += redo
                plain_run += not redo
                continue
            self._dense(f, b, dense_run, plain_run, ops)
            if dense_run + plain_run:  # none: the dense layer need not be costed
                wg += self.w_dense * (dense_run + plain_run)
            dense_run = plain_run = 0
            if moe_layers is not None:  # collect mode: the parts are added by moe_plan
                moe_layers.append((layer, self.recompute_moe and redo, True))
                wg += self.w_moe_base
                f.extend(self.moe_base[0], ops=ops)
                b.extend(self.moe_base[1] if redo else self.moe_plain_bwd, ops=ops)
                continue
            fp, bp = self.moe.part(layer, mb, False), self.moe.part(layer, mb, True)
            self.ep_parts += [fp, bp]
            # the experts' weight-gradient half of their backward (none when frozen: LoRA)
            wg += self.w_moe_base + (0.0 if self.moe.frozen else bp.experts / 2)
            f.extend(self.moe_base[0], ops=ops)
            f.extend(moe_phase(fp, ops), ops=ops)
            b.extend(moe_phase(bp, ops), ops=ops)
            if self.recompute_moe and redo:  # the re-run forward counts in the breakdown too
                rp = self.moe.part(layer, mb, "redo")
                self.ep_parts.append(rp)
                b.extend(moe_phase(rp, ops), ops=ops)
            b.extend(self.moe_base[1] if redo else self.moe_plain_bwd, ops=ops)
        self._dense(f, b, dense_run, plain_run, ops)
        if dense_run + plain_run:  # none: the dense layer need not be costed
            wg += self.w_dense * (dense_run + plain_run)
        if bf16_run + bf16_plain:
            self.bf16._dense(f, b, bf16_run, bf16_plain, ops)
            wg += self.bf16.w_dense * (bf16_run + bf16_plain)
        moved = sum(layer < self.offload_layers for layer in self.shape.layer_ids(s, c))
        if moved and self.offload is not None:
            f.extend(self.offload[0], moved, ops), b.extend(self.offload[1], moved, ops)
        if self.shape.mtp(s, c):
            self._mtp(f, b, mb, ops, moe_layers)
        if last:
            self._mtp_logits(f, b, ops)
            f.extend(self.output[0], ops=ops)
        if first:
            b.extend(self.embed[1], ops=ops)
        return f, b, wg if moe_layers is not None else min(wg, b.duration)

    def _mtp(self, f: Phase, b: Phase, mb: int, ops: bool,
             moe_layers: list[tuple[int, bool, bool]] | None) -> None:
        """Multi-token-prediction modules on their chunk (the last, or a layout's standalone
        MTP stage): each one more decoder layer of the last layer's kind (DeepSeek-V3 sec.
        2.2), recomputed as the model's layers are: under full recompute Megatron-Core
        checkpoints the whole MTP layer (``MultiTokenPredictionLayer._checkpointed_forward``,
        routed experts included), under selective recompute its inner layer applies the
        recompute modules. Its logits and loss run with the main loss (:meth:`_mtp_logits`)."""
        m = self.w.model
        redo = self.recompute_moe
        for k in range(m.mtp_num_layers):
            layer = m.num_layers + k
            if self.moe is not None and is_moe_layer(m.moe, layer) and moe_layers is not None:
                moe_layers.append((layer, redo, False))  # collect mode: parts added by moe_plan
                f.extend(self.moe_base[0], ops=ops), b.extend(self.moe_base[1], ops=ops)
            elif self.moe is not None and is_moe_layer(m.moe, layer):
                fp, bp = self.moe.part(layer, mb, False), self.moe.part(layer, mb, True)
                self.ep_parts += [fp, bp]
                f.extend(self.moe_base[0], ops=ops), f.extend(moe_phase(fp, ops), ops=ops)
                b.extend(moe_phase(bp, ops), ops=ops)
                if redo:  # the re-run forward of the routed part
                    rp = self.moe.part(layer, mb, "redo")
                    self.ep_parts.append(rp)
                    b.extend(moe_phase(rp, ops), ops=ops)
                b.extend(self.moe_base[1], ops=ops)
            else:
                f.extend(self.dense[0], ops=ops), b.extend(self.dense[1], ops=ops)

    def _mtp_logits(self, f: Phase, b: Phase, ops: bool) -> None:
        """Each MTP module's output layer and loss, on the loss's chunk (Megatron-Core
        ``process_mtp_loss`` runs on the post-process rank with the shared output head)."""
        for _ in range(self.w.model.mtp_num_layers):
            f.extend(self.output[0], ops=ops), b.extend(self.output[1], ops=ops)
