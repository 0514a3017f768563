"""Split decoder layers over pipeline stages (and virtual stages).

Rules, in order:

1. ``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``
   fix the first / last stage; the rest is spread evenly over the middle stages
   (Megatron-Core's uneven pipeline split). The middle must divide evenly.
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

from dataclasses import dataclass

from ..config.workload import Workload
from ..errors import ConfigError
from ..schedules import get_schedule


@dataclass(frozen=True)
class Partition:
    """``layers[stage][chunk]``: decoder layers of each chunk a stage holds.

    ``place[stage][chunk]``: the global chunk it holds (default Megatron's
    ``c*p + s``); ``counts[g]``: layers of global chunk ``g``.
    """

    layers: tuple[tuple[int, ...], ...]
    note: str
    place: tuple[tuple[int, ...], ...] | None = None

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

    @property
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
        g = self.place[stage][chunk]
        start = sum(self.counts[:g])
        return list(range(start, start + self.layers[stage][chunk]))

    def stage_layer_ids(self, stage: int) -> list[int]:
        """Every decoder layer ``stage`` holds, chunk by chunk."""
        return [i for c in range(len(self.layers[stage])) for i in self.layer_ids(stage, c)]


def partition_layers(w: Workload) -> Partition:
    L = w.model.num_layers
    p = w.parallelism.pipeline
    sched = get_schedule(w.parallelism.pipeline_schedule)
    vp = sched.chunks(w.parallelism.vp)
    route = sched.route(p, w.parallelism.vp)
    first = w.parallelism.decoder_first_pipeline_num_layers
    last = w.parallelism.decoder_last_pipeline_num_layers
    chunks = route.chunks_per_copy
    if first is not None or last is not None:
        counts, note = _explicit(L, p, chunks // p, first, last)
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
    return Partition(layers=layers, note=note, place=place)


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


def _explicit(L: int, p: int, vp: int, first: int | None, last: int | None):
    if vp > 1:
        raise ConfigError("parallelism.decoder_first_pipeline_num_layers", first,
                          "uneven first/last stages are not supported with virtual_pipeline > 1 "
                          "or a two-chunk (V-shape) schedule")
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
    counts = [mid] * p
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts, f"uneven split: first={counts[0]}, last={counts[-1]}, middle={mid}"
