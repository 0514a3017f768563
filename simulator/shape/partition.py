"""Split decoder layers over pipeline stages (and virtual stages).

Rules, in order:

1. ``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``
   fix the first / last stage; the rest is spread evenly over the middle stages
   (Megatron-Core's uneven pipeline split). The middle must divide evenly; with
   virtual pipelining each stage's layers split evenly over its ``vp`` chunks
   (``get_num_layers_to_build``), so each count must divide by ``vp``.
0. ``pipeline_model_parallel_layout`` (Megatron-Core's string, e.g. ``"Et*3|(tt|)*29,m|L"``:
   E embedding, t decoder layer, m multi-token-prediction layer, L loss) gives every
   chunk's layers explicitly; it excludes the options below. The MTP layers run with the
   loss, or in the standalone stage the layout names (``Partition.mtp_chunk``).
1b. ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``
   count the embedding / the loss as one layer: ``L + 1 (+1)`` split evenly over the
   ``pp*vp`` chunks (it must divide), the first / last chunk builds one decoder layer
   fewer (Megatron-Core ``transformer_block.get_num_layers_to_build``).
2. Without them, if ``pp * vp`` divides the layers, every chunk gets the same count.
3. Otherwise each chunk gets ``ceil(L / (pp*vp))`` and the surplus is taken one
   layer at a time from the outermost chunks (first, last, second, second-last...)
   because those also carry the embedding and the output layer. This is how
   Llama 3 405B placed 126 layers on 16 stages (7 on the first and last, 8
   elsewhere). The result says which rule was used in ``note``.

The split is over the *global* chunks of one model copy; which global chunk
each (stage, chunk) holds is the schedule's placement
(:meth:`simulator.schedules.Schedule.place`): Megatron's interleaving puts
global chunk ``c*p + s`` on stage ``s`` as chunk ``c``, a V shape ``s`` and
``2p-1-s``, DualPipe stage ``s`` and ``p-1-s`` of two model copies. Layer ids
of a chunk (:meth:`Partition.layer_ids`) are read here and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from ..config.workload import Workload
from ..errors import ConfigError
from ..schedules import schedule_of


@dataclass(frozen=True)
class Partition:
    """``layers[stage][chunk]``: decoder layers of each chunk a stage holds.

    ``place[stage][chunk]``: the global chunk it holds (default Megatron's
    ``c*p + s``); ``counts[g]``: layers of global chunk ``g``.
    """

    layers: tuple[tuple[int, ...], ...]
    note: str
    place: tuple[tuple[int, ...], ...] | None = None
    # global chunk holding the multi-token-prediction layers when a layout puts them in a
    # stage of their own (Megatron-Core's standalone MTP); None: with the loss, the last chunk
    mtp_chunk: int | None = None

    def __post_init__(self) -> None:
        if self.place is None:
            p = len(self.layers)
            object.__setattr__(self, "place", tuple(
                tuple(c * p + s for c in range(len(self.layers[s]))) for s in range(p)))

    def stage_layers(self, stage: int) -> int:
        return sum(self.layers[stage])

    @property
    def num_stages(self) -> int:
        return len(self.layers)

    @cached_property  # frozen: computed once (layer_ids asks for it per chunk)
    def counts(self) -> tuple[int, ...]:
        """Layers per global chunk of one model copy."""
        n = 1 + max(max(row) for row in self.place)
        out = [0] * n
        for row, lay in zip(self.place, self.layers, strict=True):
            for g, k in zip(row, lay, strict=True):
                out[g] = k
        return tuple(out)

    def layer_ids(self, stage: int, chunk: int) -> list[int]:
        """Global 0-based decoder-layer indices of ``chunk`` on ``stage``."""
        start = self._starts[self.place[stage][chunk]]
        return list(range(start, start + self.layers[stage][chunk]))

    @cached_property
    def _starts(self) -> tuple[int, ...]:
        """First layer index of each global chunk (prefix sums of ``counts``)."""
        out, at = [], 0
        for k in self.counts:
            out.append(at)
            at += k
        return tuple(out)

    def stage_layer_ids(self, stage: int) -> list[int]:
        """Every decoder layer ``stage`` holds, chunk by chunk."""
        return [i for c in range(len(self.layers[stage])) for i in self.layer_ids(stage, c)]


def partition_layers(w: Workload) -> Partition:
    L = w.model.num_layers
    p = w.parallelism.pipeline
    sched = schedule_of(w.parallelism)
    vp = sched.chunks(w.parallelism.vp)
    route = sched.route(p, w.parallelism.vp)
    first = w.parallelism.decoder_first_pipeline_num_layers
    last = w.parallelism.decoder_last_pipeline_num_layers
    chunks = route.chunks_per_copy
    emb = w.parallelism.account_for_embedding_in_pipeline_split
    loss = w.parallelism.account_for_loss_in_pipeline_split
    layout = w.parallelism.pipeline_model_parallel_layout
    if layout is not None and (emb or loss or first is not None or last is not None):
        raise ConfigError("parallelism.pipeline_model_parallel_layout", layout,
                          "cannot be combined with other pipeline layout arguments "
                          "(Megatron-Core's rule)")
    if (emb or loss) and (first is not None or last is not None):
        raise ConfigError("parallelism.account_for_embedding_in_pipeline_split", emb,
                          "cannot be combined with decoder_first/last_pipeline_num_layers "
                          "(Megatron-Core's rule)")
    mtp_chunk = None
    if layout is not None:
        counts, mtp_chunk = _from_layout(layout, L, chunks, w.model.mtp_num_layers or 0, p)
        note = f"layout {layout}"
    elif first is not None or last is not None:
        stage_of = [0] * chunks
        for (s, _c), (_copy, g) in route.place.items():
            stage_of[g] = s
        counts, note = _explicit(L, p, chunks // p, first, last, stage_of)
    elif emb or loss:
        counts, note = _accounted(L, chunks, emb, loss)
    elif L % chunks == 0:
        counts, note = [L // chunks] * chunks, f"even split: {L // chunks} layers per chunk"
    else:
        counts = _outer_first(L, chunks)
        note = (f"{L} layers do not divide over {chunks} pipeline chunks: "
                f"{max(counts)} per chunk, one fewer on the {chunks * max(counts) - L} "
                "outermost chunks (first/last first, as Llama 3 405B)")
        if min(counts) < 1:
            raise ConfigError("parallelism.pipeline", p,
                              f"pipeline*virtual_pipeline ({chunks}) must not exceed "
                              f"num_layers ({L})")
    place = tuple(tuple(route.place[(s, c)][1] for c in range(vp)) for s in range(p))
    layers = tuple(tuple(counts[g] for g in row) for row in place)
    return Partition(layers=layers, note=note, place=place, mtp_chunk=mtp_chunk)


def _outer_first(L: int, chunks: int) -> list[int]:
    per = -(-L // chunks)
    counts = [per] * chunks
    surplus = per * chunks - L
    order = []
    lo, hi = 0, chunks - 1
    while lo <= hi:
        order.append(lo)
        if hi != lo:
            order.append(hi)
        lo, hi = lo + 1, hi - 1
    for i in order[:surplus]:
        counts[i] -= 1
    return counts


def parse_layout(layout: str) -> list[str]:
    """Megatron-Core's layout string as one string of layer letters per chunk: commas are
    cosmetic, ``(...)*n`` and ``x*n`` repeat (``PipelineParallelLayerLayout.parse_str_to_list``,
    megatron/core/transformer/pipeline_parallel_layer_layout.py)."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    return text.split("|")


def _from_layout(layout: str, L: int, chunks: int, mtp: int = 0, pp: int = 1
                 ) -> tuple[list[int], int | None]:
    """Decoder layers per chunk of a Megatron-Core layout string, and the global chunk of a
    standalone MTP stage (None: the MTP layers, if any, run with the loss), checked by
    Megatron-Core's rules (``PipelineParallelLayerLayout.validate_layer_layout``): one E
    first, one L last, ``num_layers`` t's, ``mtp_num_layers`` m's after every t, all in one
    stage, and that stage the last virtual stage of its pipeline rank (``pp`` ranks; segment
    ``g`` is virtual stage ``g // pp`` of rank ``g % pp``)."""
    field = "parallelism.pipeline_model_parallel_layout"
    segments = parse_layout(layout)
    bad = sorted(set("".join(segments)) - set("EtmL"))
    if bad:
        raise ConfigError(field, layout, f"letter {bad[0]!r}: use E (embedding), t (decoder "
                          "layer), m (multi-token prediction layer), L (loss)")
    if len(segments) != chunks:
        raise ConfigError(field, layout, f"has {len(segments)} stages; pipeline * "
                          f"virtual_pipeline is {chunks} (a layout is one plan's: set "
                          f"{field}=null for the simulator's own split)")
    counts = [seg.count("t") for seg in segments]
    if sum(counts) != L:
        raise ConfigError(field, layout, f"places {sum(counts)} decoder layers; the model "
                          f"has {L}")
    if "E" not in segments[0] or "L" not in segments[-1] or \
            "".join(segments).count("E") != 1 or "".join(segments).count("L") != 1:
        raise ConfigError(field, layout, "needs one E in the first stage and one L in the "
                          "last (the simulator places the embedding and the loss there)")
    flat = "".join(segments)
    if flat.count("m") != mtp:
        raise ConfigError(field, layout, f"places {flat.count('m')} MTP layers (m); "
                          f"model.mtp_num_layers is {mtp} (Megatron-Core requires them equal)")
    if not mtp:
        return counts, None
    holders = [g for g, seg in enumerate(segments) if "m" in seg]
    if len(holders) != 1 or "t" in flat[flat.index("m"):]:
        raise ConfigError(field, layout, "needs every m in one stage, after the last t "
                          "(Megatron-Core: decoder layers before MTP layers, all MTP layers "
                          "in one virtual stage)")
    g = holders[0]
    if g == chunks - 1:
        return counts, None
    if g // pp != chunks // pp - 1:
        raise ConfigError(field, layout, f"puts the MTP layers in stage {g}, not the last "
                          "virtual stage of a pipeline rank (Megatron-Core's rule for a "
                          "standalone MTP stage)")
    return counts, g


def _accounted(L: int, chunks: int, emb: bool, loss: bool) -> tuple[list[int], str]:
    total = L + emb + loss
    if total % chunks:
        raise ConfigError("parallelism.pipeline", chunks,
                          f"pipeline*virtual_pipeline ({chunks}) must divide num_layers "
                          f"plus the accounted embedding/loss ({total})")
    per = total // chunks
    counts = [per] * chunks
    counts[0] -= emb
    counts[-1] -= loss
    if min(counts) < 0:
        raise ConfigError("parallelism.pipeline", chunks, "leaves a chunk below zero layers")
    return counts, (f"{per} layers per chunk with the embedding / loss counted as a layer: "
                    f"first {counts[0]}, last {counts[-1]}")


def _explicit(L: int, p: int, vp: int, first: int | None, last: int | None,
              stage_of: list[int]) -> tuple[list[int], str]:
    fixed = (first or 0) + (last or 0)
    middle_stages = p - (first is not None) - (last is not None)
    rest = L - fixed
    if middle_stages < 0 or (middle_stages == 0 and rest != 0) or rest < middle_stages \
            or (middle_stages and rest % middle_stages):
        raise ConfigError("parallelism.decoder_first_pipeline_num_layers", first,
                          f"first={first}, last={last} leave {rest} layers for "
                          f"{middle_stages} middle stages: they must divide evenly "
                          f"(num_layers={L}, pipeline={p})")
    mid = rest // middle_stages if middle_stages else 0
    stages = [mid] * p
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    if any(n % vp for n in stages):
        raise ConfigError("parallelism.virtual_pipeline", vp,
                          f"must divide each stage's layers (first={stages[0]}, "
                          f"middle={mid}, last={stages[-1]}) to split them over chunks")
    # each global chunk holds its stage's layers / vp (Megatron: c*p + s on stage s)
    counts = [stages[stage_of[g]] // vp for g in range(p * vp)]
    return counts, f"uneven split: first={stages[0]}, last={stages[-1]}, middle={mid}"
