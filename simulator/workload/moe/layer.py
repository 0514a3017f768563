"""Cost of the routed-expert part of one MoE layer, per micro-batch draw of the router.

Per MoE layer and micro-batch, as Megatron-Core's ``MoELayer`` runs it:

1. **router**: gating GEMM ``T x h @ h x E`` (bf16) and score / top-k kernels
   (memory bound, fp32 scores read a few times);
2. **permute**: copy each token once per assignment into expert order, reading
   ``T*h`` and writing ``T*k*h`` elements (bf16), memory bound;
3. **dispatch** (:mod:`.dispatch`, by ``token_dispatcher_type``);
4. **experts** as one grouped GEMM per rank: expert ``e`` multiplies its ``n_e``
   rows, so small groups run at lower efficiency (the GEMM shape curve of
   :func:`simulator.compute.gemm_efficiency` on each expert's own ``m x n x k``),
   one kernel per expert and linear (TE ``GroupedLinear``), plus FP8 input
   quantisation per expert (read bf16, write fp8) under an FP8 recipe; the
   slowest EP rank sets the pace;
5. **combine** and **unpermute** (read ``T*k*h``, write ``T*h``), the mirror.

Backward: the same exchanges (gradients, bf16), twice the expert FLOPs, twice the
memory traffic. Source tokens per rank: ``T * etp / tp`` (with ETP < TP the TP
ranks split the tokens, Megatron-Core parallel folding).

Expert-parallel communication is exposed unless overlapped:
``shared_expert_overlap`` hides dispatch/combine under the shared expert of the
same micro-batch; ``overlap_moe_expert_parallel_comm`` (Megatron-Core's combined
1F1B: one micro-batch's forward interleaved with another's backward) hides each
forward exchange under the backward compute of the same layer and each backward
exchange under the forward compute. Overlapped compute runs
``comm_overlap_slowdown`` slower for the overlapped time (as TP overlap does).
Host launch-boundedness and the dropless sync: :mod:`.host`.

Router draws (:mod:`.draws`): one pool per step from ``training.seed``, each
(layer, micro-batch) pair using one draw; reproducible, and a different seed changes
only these draws. Costs are computed for the whole pool at once (numpy over draws),
as :class:`~.moe_part.MoEPart` fields, and kept across the plans that share the
draws (:mod:`.costs`).
"""

from __future__ import annotations

import numpy as np

from ...compute import BYTES, gemm_efficiency, gemm_time, memory_time
from ...config.workload import Workload
from ...hardware import Placement, Topology
from ...moe import RouterLoads
from ...moe.batch import LoadRows
from ...shape.plan_shape import routed_tokens
from ..cost import Phase
from .costs import cost_slot
from .dispatch import Dispatcher
from .draws import DrawTable, draw_table
from .eager import eager_expert_ops
from .host import BACKWARD_FACTOR, Fusions, graphed_scopes, launch_counts, layer_periods
from .part import PART_FIELDS, MoEPart, part_fields


class MoECost:
    """Routed-expert cost model for one workload on one topology."""

    def __init__(self, w: Workload, topo: Topology, groups: dict[str, Placement], T: float,
                 base: tuple[Phase, Phase] | None = None, base_redo: float | None = None):
        m, p = w.model, w.parallelism
        assert m.moe is not None
        self.w, self.topo, self.moe = w, topo, m.moe
        self._place = groups["ep"]
        self.ep = p.expert
        self.etp = p.etp
        self.h = m.hidden_size
        self.ffn = m.moe.ffn_hidden_size or m.ffn
        self.glu = m.gated_linear_unit
        self.tokens = routed_tokens(w, T)
        self.prec = w.training.precision_type
        self.fp8 = self.prec.scaled  # quantises its inputs (casts, launches)
        # LoRA on a MoE model freezes the experts: their backward runs the data gradient only
        self.frozen = w.training.peft == "lora"
        self.seed = w.training.seed
        self.base = base or (Phase(), Phase())
        # seconds of the base ops' recompute + backward (a recomputed layer's backward)
        self.base_redo = self.base[1].duration if base_redo is None else base_redo
        tr = w.training
        sync_free = m.moe.capacity_factor is not None and m.moe.pad_expert_input_to_capacity
        self.synced = not sync_free and tr.graph_impl != "full_iteration"
        graphed = graphed_scopes(tr.graph_impl, list(tr.cuda_graph_scope), self.synced)
        # the base ops hold their FP8 quantisation kernels already (workload/fp8.py)
        fused = Fusions(router=m.moe.router_fusion, permute=m.moe.permute_fusion,
                        rope=tr.apply_rope_fusion)
        self.launches = launch_counts(len(self.base[0].ops), m.moe.num_experts // self.ep,
                                      self.fp8, graphed, fused)
        # clamped GLU and expert FC2 bias outside the fused kernels: GPU time only, their
        # launches are not added to the fitted host model (:mod:`.eager`, "Host")
        self.eager = eager_expert_ops(w, self.ffn / self.etp, self.h)
        self.dispatcher = self._dispatcher()
        self.shared = self._shared_seconds(m.moe.shared_expert_ffn_hidden_size / p.tensor, T)
        self._table: DrawTable | None = None
        # costs of the pool's draws: "rows" -> (forward, backward) fields; (row, backward)
        # -> MoEPart. Placement-dependent: looked up again when ``place`` changes.
        self._slot: dict | None = None

    @property
    def place(self) -> Placement:
        """Where the EP group sits; setting it re-places the dispatcher."""
        return self._place

    @place.setter
    def place(self, value: Placement) -> None:
        self._place = value
        self.dispatcher = self._dispatcher()
        self._slot = None

    @property
    def _cache(self) -> dict:
        """Where the pool's costs are kept: for a shared (read-only) draw table, a slot
        shared by every MoECost that reads it with the same cost inputs
        (:func:`.moe_costs.cost_slot`); else this object's own."""
        if self._slot is None:
            rows = self.table.rows
            self._slot = ({} if rows.kept_tokens.flags.writeable
                          else cost_slot(rows, self.topo, self._cost_key()))
        return self._slot

    def _cost_key(self) -> tuple:
        """Everything :meth:`_costs` reads besides the draws: the topology (by identity: one
        object per configuration value), where the EP group sits, the MoE block,
        the expert and token shapes, precision, sync, launches, the shared expert and the
        layer's base phase times."""
        return (id(self.topo), self._place, self.moe.model_dump_json(), self.ep,
                self.etp, self.tokens, self.h, self.ffn, self.glu, self.fp8, self.eager,
                self.synced,
                self.launches, self.shared, self.base[0].duration, self.base[1].duration,
                self.base_redo)

    def _dispatcher(self) -> Dispatcher:
        moe = self.moe
        groups = None if (moe.router_num_groups or 1) == 1 else \
            (moe.num_experts, moe.router_num_groups, moe.router_group_topk)
        return Dispatcher(moe.token_dispatcher_type, self._place, self.topo, self.ep,
                          self.tokens, self.h, moe.max_nodes_per_token, groups)

    @property
    def table(self) -> DrawTable:
        """The step's router draws (:mod:`.draws`), drawn on first use."""
        if self._table is None:
            self._table = draw_table(self.w, self.tokens * self.ep, self.deterministic)
        return self._table

    def draws(self) -> list[RouterLoads]:
        """One router draw per (MoE layer, micro-batch) of the step; uniform routing: its
        one draw. (Aggregates: :meth:`mean_imbalance`, :meth:`kept_totals`.)"""
        t = self.table
        if t.entry.size == 0:  # no MoE layer at all (first_k_dense covers the model)
            return []
        if len(t.rows) == 1:
            return [t.rows.row(0)]
        return [t.rows.row(int(i)) for i in t.entry.ravel()]

    def route(self, layer: int, mb: int) -> RouterLoads:
        """The loads (layer, micro-batch ``mb``) sees."""
        return self.table.rows.row(self.table.index(layer, mb))

    def mean_imbalance(self) -> dict[str, float]:
        """:meth:`RouterLoads.imbalance` averaged over every (layer, micro-batch) pair
        (empty without MoE layers)."""
        uses = self.table.uses()
        if not uses.sum():
            return {}
        weight = uses / uses.sum()
        return {k: float((weight * v).sum())
                for k, v in self.table.rows.imbalance(self.ep).items()}

    def kept_totals(self) -> tuple[int, int, int]:
        """``(kept, routed, pairs)``: assignments kept and routed, summed over every
        (layer, micro-batch) pair of the step, and the number of pairs."""
        t = self.table
        pairs = t.entry.size
        kept = int((t.uses() * t.rows.kept_tokens.sum(axis=1)).sum())
        return kept, pairs * t.rows.total_assignments, pairs

    def _shared_seconds(self, ffn_t: float, T: float) -> float:
        """Forward seconds of the shared expert's GEMMs (what shared-expert overlap hides)."""
        if ffn_t <= 0:
            return 0.0
        gpu, dt = self.topo.gpu, self.w.training.precision
        return (gemm_time(T, ffn_t * (2 if self.glu else 1), self.h, gpu, dt)
                + gemm_time(T, self.h, ffn_t, gpu, dt))

    def expert_seconds(self, kept: np.ndarray, backward: bool) -> np.ndarray:
        """Grouped-GEMM seconds per EP rank for per-expert kept assignments ``kept``
        (``[E]`` -> ``[ep]``, or many draws ``[n, E]`` -> ``[n, ep]``): the experts'
        seconds (:meth:`_expert_kernels`) summed over each rank's contiguous experts, with
        the eager clamp / bias kernels (:mod:`.eager`) at their own forward and backward
        bytes (the GEMMs and the activation: twice the forward in the backward)."""
        kept = np.asarray(kept)
        lo, hi = (int(kept.min()), int(kept.max())) if kept.size else (0, 0)
        if hi - lo + 1 < kept.size // 4:  # few distinct counts: cost each one once (same values)
            per_expert = self._expert_kernels(np.arange(lo, hi + 1), backward)[kept - lo]
        else:
            per_expert = self._expert_kernels(kept, backward)
        gpu = self.topo.gpu
        ranks = (*per_expert.shape[:-1], self.ep, per_expert.shape[-1] // self.ep)
        out = ((per_expert.reshape(ranks).sum(axis=-1) + gpu.kernel_overhead_s)
               * (2.0 if backward else 1.0))
        if self.eager.any:
            bw = gpu.hbm_bandwidth * gpu.memory_bandwidth_efficiency
            ea = self.eager
            row = ea.bwd_row_bytes if backward else ea.fwd_row_bytes
            per_k = ea.bwd_kernels_per_expert if backward else ea.fwd_kernels_per_expert
            fixed = ea.bwd_kernels_fixed if backward else ea.fwd_kernels_fixed
            eager = kept * row / bw + per_k * gpu.kernel_overhead_s
            out = out + eager.reshape(ranks).sum(axis=-1) + fixed * gpu.kernel_overhead_s
        return out

    def _expert_kernels(self, kept: np.ndarray, backward: bool = False) -> np.ndarray:
        """Seconds of one expert holding ``kept`` assignments (elementwise), per pass; the
        caller doubles it for the backward (data- and weight-gradient GEMMs, twice the
        activation's bytes).

        Its GEMMs at their own shape's efficiency, one kernel per expert and linear
        (``kernel_overhead_s``), the activation, and under an FP8 recipe the quantisation
        of each GEMM's 16-bit operand (read 16-bit, write the row- and column-wise copies;
        :data:`simulator.precision.FP8_CASTS` ``expert_input``): the two inputs (``h`` and
        ``f`` wide) in the forward, the two output gradients (``h`` and ``f`` or ``2f``
        wide) in the backward, each once, so halved here against the caller's doubling.
        """
        gpu = self.topo.gpu
        n = kept.astype(float)
        f = self.ffn / self.etp
        fc1_out = f * (2 if self.glu else 1)
        # the caller doubles the backward: frozen experts (LoRA) run their GEMMs' data
        # gradient only, so half of it here
        total = self._expert_gemms(n) * (0.5 if backward and self.frozen else 1.0)
        bw = gpu.hbm_bandwidth * gpu.memory_bandwidth_efficiency
        if self.prec.casts is not None:
            # forward: the FC1 and FC2 inputs (k wide); backward: the FC2 and FC1 output
            # gradients (h and fc1_out wide), once per step of the doubled backward
            widths = (self.h + fc1_out) / 2.0 if backward else self.h + f
            total += n * widths * self.prec.casts.expert_input / bw \
                + 2 * gpu.kernel_overhead_s * (0.5 if backward else 1.0)
        act = n * f * 2 * (3 if self.glu else 2) / bw
        return total + act

    def _expert_gemms(self, n: np.ndarray) -> np.ndarray:
        """Seconds of the two GEMMs (FC1, FC2) of one expert holding ``n`` assignments, one
        pass, each at its shape's efficiency plus one kernel overhead."""
        gpu, dtype = self.topo.gpu, self.prec.kernel
        n = np.asarray(n, dtype=float)
        f = self.ffn / self.etp
        fc1_out = f * (2 if self.glu else 1)
        total = np.zeros_like(n)
        for mm, nn, kk in ((n, fc1_out, self.h), (n, self.h, f)):
            eff = gemm_efficiency(np.maximum(mm, 1.0), nn, kk, gpu, dtype)
            total += 2.0 * mm * nn * kk / (gpu.peak(dtype) * eff) + gpu.kernel_overhead_s
        return total

    @property
    def deterministic(self) -> bool:
        """Uniform routing ignores the random draw: every (layer, micro-batch) costs the same."""
        return self.moe.router_load == "uniform"

    def part(self, layer: int, mb: int, backward: bool | str) -> MoEPart:
        """The MoE part of ``layer`` for micro-batch ``mb`` (for every micro-batch at once:
        :meth:`stacked` and :mod:`.plan`); ``backward="redo"``: the forward re-run in
        a recomputed layer's backward."""
        idx = self.table.index(layer, mb)
        key = (idx, backward)
        if key not in self._cache:
            fields = self.cost_rows()[_KIND[backward]]
            self._cache[key] = MoEPart(loads=self.table.rows.row(idx),
                                       **{k: float(v[idx]) for k, v in fields.items()})
        return self._cache[key]

    def stacked(self, backward: bool | str) -> np.ndarray:
        """The pool's part fields stacked ``[field, draw]`` in :data:`PART_FIELDS` order
        (``stacked(b)[:, table.entry]``: every (layer, micro-batch) at once)."""
        key = ("stacked", backward)
        if key not in self._cache:
            fields = self.cost_rows()[_KIND[backward]]
            self._cache[key] = np.stack([fields[k] for k in PART_FIELDS])
        return self._cache[key]

    def cost_rows(self, rows: LoadRows | None = None) -> tuple[dict[str, np.ndarray], ...]:
        """Forward, backward and re-run forward :class:`MoEPart` fields of every draw of
        ``rows`` (default: the step's pool, cached), arrays ``[n]``: see :meth:`_costs`."""
        if rows is not None:
            return self._costs(rows)
        if "rows" not in self._cache:
            self._cache["rows"] = self._costs(self.table.rows)
        return self._cache["rows"]

    def _local(self) -> tuple[float, float]:
        """(router, permute + unpermute) forward seconds on one rank."""
        gpu, e = self.topo.gpu, BYTES["bf16"]
        T, k = self.tokens, self.moe.router_topk
        router = (_router_gemm(T, self.moe.num_experts, self.h, gpu)
                  + memory_time(4.0 * 4 * T * self.moe.num_experts, gpu))
        permute = 2 * memory_time((1 + k) * T * self.h * e, gpu)
        return router, permute

    def _costs(self, rows: LoadRows) -> tuple[dict[str, np.ndarray], ...]:
        """Forward, backward and re-run forward seconds of each draw (module docs), numpy
        over the draws. The re-run part's duration is what a recomputed layer's joint
        host / GPU period (:func:`.moe_host.recompute_period`) adds beyond the backward
        part and the base ops' recompute + backward, so the three sum to that period."""
        gpu = self.topo.gpu
        experts = self.expert_seconds(rows.kept_tokens, False).max(axis=-1)
        experts_b = self.expert_seconds(rows.kept_tokens, True).max(axis=-1)
        # a scaled precision dispatches in FP8 (NVFP4 too: Megatron-Core's all-to-all
        # quantisation is an FP8 recipe, fp8_utils.get_fp8_recipe_for_a2a)
        wire = 1.0 if self.prec.scaled else self.prec.element_bytes
        d_f, c_f = self.dispatcher.times(rows, wire, 2.0)
        d_b = c_b = c_f  # backward: both exchanges carry bf16 gradients
        router, permute = self._local()
        comp_f = experts + router + permute
        comp_b = experts_b + BACKWARD_FACTOR * (router + permute)  # = 2 x comp_f, no eager
        base_f, base_b = self.base[0].duration, self.base[1].duration
        hide_f = hide_b = 0.0
        if self.moe.shared_expert_overlap:
            hide_f, hide_b = self.shared, 2.0 * self.shared
        if self.moe.overlap_moe_expert_parallel_comm:
            hide_f, hide_b = hide_f + comp_b + base_b, hide_b + comp_f + base_f
        kappa = gpu.comm_overlap_slowdown
        exp_f = _exposed(d_f + c_f, hide_f, kappa)
        exp_b = _exposed(d_b + c_b, hide_b, kappa)
        fwd, bwd, redo = layer_periods(self.launches, gpu.host_launch_s, self.synced,
                                       (base_f, base_b, self.base_redo), router,
                                       experts + permute + exp_f, comp_b + exp_b)
        redo_gpu = comp_f + exp_f
        size = len(rows)
        return (part_fields(size, fwd.duration - base_f, comp_f, exp_f, d_f, c_f, experts,
                            router, permute, fwd.stall, fwd.host),
                part_fields(size, bwd.duration - base_b, comp_b, exp_b, d_b, c_b,
                            experts_b, BACKWARD_FACTOR * router,
                            BACKWARD_FACTOR * permute, bwd.stall, bwd.host),
                part_fields(size, redo, comp_f, exp_f, d_f, c_f, experts, router, permute,
                            redo - redo_gpu, fwd.host))


_KIND = {False: 0, True: 1, "redo": 2}  # part kind -> position in cost_rows()


def _exposed(comm: float, hiding: float, kappa: float) -> float:
    """Critical-path seconds of ``comm`` overlapped with ``hiding`` seconds of compute
    (as :func:`simulator.workload.cost._exposed`)."""
    return np.maximum(0.0, comm - hiding) + kappa * np.minimum(comm, hiding)


def _router_gemm(tokens: float, experts: int, h: int, gpu) -> float:
    eff = gemm_efficiency(tokens, experts, h, gpu, "bf16")
    return 2.0 * tokens * experts * h / (gpu.peak("bf16") * eff) + gpu.kernel_overhead_s
