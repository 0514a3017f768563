"""Hardware in SI units: GPUs, network tiers, and where parallel groups sit.

Converted once from :mod:`simulator.config.topology` (``GBps`` -> bytes/s,
``us`` -> s, ``TFLOP/s`` -> FLOP/s). Everything downstream reads these
objects only.

Extension point: a new fabric is a new :class:`Tier` list. Collectives ask a
topology two things only: :meth:`Topology.place` (which tier a group spans and
how many members share each domain) and the tier's link parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config.topology import TierConfig, TopologyConfig
from ..errors import ConfigError

GB = 1e9
TB = 1e12
US = 1e-6
MB = 1e6


MiB = 2**20


def usable_hbm_bytes(hbm_GB: float, usable_MiB: float | None) -> float:
    """Bytes a process can allocate: nvidia-smi's total (MiB, = ``cudaMemGetInfo`` total)
    where the topology gives it, never more than ``hbm_GB`` read as GiB (HBM is sold in
    GiB under a "GB" label: an "80 GB" H100 carries 80 GiB and exposes 81,559 MiB =
    85.52e9 bytes). Without a usable size, ``hbm_GB`` decimal GB. So an override of
    ``hbm_GB`` alone (a 40 GB what-if) still lowers the capacity."""
    if usable_MiB:
        return min(usable_MiB * MiB, hbm_GB * 2**30)
    return hbm_GB * GB


@dataclass(frozen=True)
class GPU:
    """Accelerator peaks (FLOP/s, bytes, bytes/s) and achievable fractions."""

    name: str
    peak_flops: dict[str, float]
    hbm_bytes: float
    hbm_bandwidth: float
    gemm_efficiency: float
    gemm_half_dim: float
    fp8_gemm_efficiency: float
    attention_efficiency: float
    memory_bandwidth_efficiency: float
    kernel_overhead_s: float
    framework_memory_bytes: float
    comm_overlap_slowdown: float = 0.0
    host_launch_s: float = 0.0
    host_link_bandwidth: float | None = None  # bytes/s per direction, GPU <-> host
    clock_ratio: float = 1.0  # sustained clock under the power limit / default (power.py)
    fp8_any_layout: bool = False  # FP8 GEMMs take non-TN layouts (Blackwell; memory/states.py)
    fp4_gemm_efficiency: float = 0.0  # NVFP4 GEMMs' large-GEMM fraction of the fp4 peak

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` at the clock the power limit sustains (the
        datasheet peak times ``clock_ratio``); raises ConfigError if the GPU lacks it."""
        if dtype not in self.peak_flops:
            raise ConfigError("training.precision", dtype,
                              f"{self.name} has no {dtype} tensor cores; "
                              f"supported: {', '.join(sorted(self.peak_flops))}")
        return self.peak_flops[dtype]

    def datasheet_peak(self, dtype: str) -> float:
        """The datasheet's dense peak FLOP/s (MFU / HFU denominators), whatever the limit."""
        return self.peak(dtype) / self.clock_ratio


@dataclass(frozen=True)
class Tier:
    """One network level: domains of ``size`` GPUs.

    ``bandwidth`` is bytes/s per GPU per direction at line rate; ``efficiency``
    the fraction achieved by large ring transfers; ``nvls_busbw`` the in-switch
    (NVLink SHARP) all-reduce bus bandwidth, bytes/s, where the tier has it.
    """

    name: str
    size: int
    bandwidth: float
    latency_s: float
    efficiency: float
    oversubscription: float
    nvls_busbw: float | None
    alltoall_efficiency: float
    half_bandwidth_bytes: float
    curve_exponent: float
    deepep_efficiency: float = 0.0
    curve_ranks: int = 0  # group size half_bandwidth_bytes holds at; 0: the buffer S itself
    nvls_ranks: int = 0  # group size nvls_busbw was measured at; 0: busbw size-independent
    nvls_link_bound: bool = False  # NVLS algbw grows as n/(n+1) (each GPU's link bounds it)
    base_latency_s: float = 0.0  # once per collective, s (NCCL tuning.cc baseLat)
    ll_busbw: float = 0.0  # LL protocol ring bus bandwidth, bytes/s; 0: not modelled
    full_mesh: bool = False  # GPUs wired to each other directly (no switch)

    @property
    def achievable(self) -> float:
        """Large-message ring bandwidth per GPU per direction, bytes/s."""
        return self.bandwidth * self.efficiency / self.oversubscription

    def peer_share(self, members: int) -> float:
        """Fraction of a GPU's ``bandwidth`` a group of ``members`` GPUs of one domain can use
        (dimensionless).

        1 on a switched tier (any GPU reaches the switch at its full rate). On a
        ``full_mesh`` tier a GPU's bandwidth is the sum of ``size - 1`` equal peer links and a
        group reaches only the ``members - 1`` links to its own members: ``(members - 1) /
        (size - 1)``. RCCL says so for MI300X ("When using less than 8 GPUs, one can only
        achieve a fraction of the potential bandwidth", ROCm/rccl README, PR #1270), and its
        rings (channels) over different link orders are what let a full group use all
        ``size - 1`` (AMD MI300X platform datasheet: 7 dedicated xGMI links per GPU).
        """
        if not self.full_mesh or self.size < 2 or members < 2:
            return 1.0
        return min(members - 1, self.size - 1) / (self.size - 1)

    def size_efficiency(self, nbytes: float, ranks: int = 0) -> float:
        """Fraction of ``achievable`` reached by a message of ``nbytes`` bytes.

        ``1 / (1 + (S_half / S)**gamma)``: a two-parameter saturation curve fitted
        per tier to nccl-tests bus bandwidth against message size (pipeline
        fill, protocol and channel-count effects below ~100 MB). With ``curve_ranks``
        set and the group's ``ranks`` given, the curve sees the per-rank shard: a ring
        or NVLS step moves ``S / n`` per rank, so the half-bandwidth point scales as
        ``S_half * n / curve_ranks`` (an 8-GPU group reaches the plateau at 1/9 of
        the buffer a 72-GPU group needs).
        """
        if nbytes <= 0:
            return 1.0
        if self.half_bandwidth_bytes <= 0:
            return 1.0
        return 1.0 / (1.0 + (self.half_point(ranks) / nbytes) ** self.curve_exponent)

    def half_point(self, ranks: int = 0) -> float:
        """Half-bandwidth buffer size for a group of ``ranks`` (bytes; see size_efficiency)."""
        if self.curve_ranks and ranks:
            return self.half_bandwidth_bytes * ranks / self.curve_ranks
        return self.half_bandwidth_bytes


@dataclass(frozen=True)
class Placement:
    """Where a parallel group's ranks sit.

    ``per_tier[i]`` is how many of the group's members share one tier-i
    domain; ``span`` is the innermost tier whose domain holds the whole group.
    """

    size: int
    stride: int
    per_tier: tuple[int, ...]
    span: int

    @property
    def local(self) -> int:
        """Members inside one innermost (scale-up) domain."""
        return self.per_tier[0]

    @property
    def domains(self) -> int:
        """Number of innermost domains the group touches (ceil: 128 contiguous ranks on
        72-GPU NVL72 domains touch two)."""
        return -(-self.size // self.per_tier[0])


_MISSING = object()
MEMO_ENTRIES = 4096  # answers one topology remembers (a search asks a few thousand)
_FROM_CONFIG: dict[int, tuple[TopologyConfig, Topology]] = {}  # by identity (fast)
_BY_VALUE: dict[str, Topology] = {}  # by canonical JSON text
FROM_CONFIG_ENTRIES = 32  # topologies of recent configurations (a sweep's handful)


@dataclass(frozen=True)
class Topology:
    """A cluster: one GPU type plus tiers ordered innermost first.

    Immutable, so the answers of pure functions of it (a group's placement, a
    collective's time) are kept in :meth:`memo`: a sweep asks the same few
    thousand times. ``dataclasses.replace`` gives a new topology with an empty memo.
    """

    name: str
    gpu: GPU
    tiers: tuple[Tier, ...]
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False,
                                  compare=False)
    # topology `calibration` block: widening of the step-time interval and the note `run`
    # prints for hardware without training measurements (simulator/metrics/calibration.py)
    interval_scale: float = 1.0
    calibration_note: str = ""

    def __getstate__(self) -> dict[str, Any]:  # a copy (pickle) starts with an empty memo
        return {"name": self.name, "gpu": self.gpu, "tiers": self.tiers,
                "interval_scale": self.interval_scale,
                "calibration_note": self.calibration_note}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in {**state, "_memo": {}}.items():
            object.__setattr__(self, key, value)

    def memo(self, key: Any, compute: Any) -> Any:
        """``compute()``, remembered under ``key``: for pure functions of this topology
        and hashable arguments (the key must hold every argument but the topology)."""
        hit = self._memo.get(key, _MISSING)
        if hit is _MISSING:
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            hit = self._memo[key] = compute()
        return hit

    @property
    def max_gpus(self) -> int:
        return self.tiers[-1].size

    @property
    def scale_up(self) -> Tier:
        return self.tiers[0]

    def place(self, size: int, stride: int = 1) -> Placement:
        """Placement of a group of ``size`` ranks ``stride`` apart in global rank order.

        Ranks fill innermost domains first (rank r lives in tier-i domain
        ``r // tiers[i].size``), as job launchers and Megatron's rank order do.
        """
        key = ("place", size, stride, type(size), type(stride))
        hit = self._memo.get(key)
        return hit if hit is not None else self.memo(key, lambda: self._place(size, stride))

    def _place(self, size: int, stride: int) -> Placement:
        per_tier = []
        for tier in self.tiers:
            members = 1 if stride >= tier.size else min(size, max(1, tier.size // stride))
            per_tier.append(members)
        span = next((i for i, m in enumerate(per_tier) if m >= size), len(self.tiers) - 1)
        return Placement(size=size, stride=stride, per_tier=tuple(per_tier), span=span)

    @staticmethod
    def from_config(cfg: TopologyConfig) -> Topology:
        """The SI topology of ``cfg``: one object per configuration value (configs are
        frozen), so the plans of a sweep share its memo, also in a worker process that
        receives a copy of the configuration with each batch of work."""
        hit = _FROM_CONFIG.get(id(cfg))
        if hit is not None and hit[0] is cfg:
            return hit[1]
        text = cfg.model_dump_json()  # every field: equal texts, equal configurations
        topo = _BY_VALUE.get(text)
        if topo is None:
            topo = _remember(_BY_VALUE, text, _from_config(cfg))
        _remember(_FROM_CONFIG, id(cfg), (cfg, topo))  # cfg kept alive: its id stays its own
        return topo


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    """``cache[key] = value``, dropping the oldest entry beyond FROM_CONFIG_ENTRIES."""
    if len(cache) >= FROM_CONFIG_ENTRIES:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value


def _from_config(cfg: TopologyConfig) -> Topology:
    from .power import clock_ratio  # the clock a power limit sustains (hardware/power.py)

    g = cfg.gpu
    ratio = clock_ratio(cfg)
    clock = ratio * TB  # peaks scale with the sustained SM clock
    # every peak the datasheet gives (a new number format: one more peak_tflops field)
    peaks = {k: v * clock for k, v in g.peak_tflops.model_dump().items() if v}
    peaks.setdefault("fp16", peaks["bf16"])
    gpu = GPU(
        name=g.name, peak_flops=peaks, hbm_bytes=usable_hbm_bytes(g.hbm_GB, g.hbm_usable_MiB),
        hbm_bandwidth=g.hbm_bandwidth_TBps * TB, gemm_efficiency=g.gemm_efficiency,
        gemm_half_dim=g.gemm_half_dim,
        fp8_gemm_efficiency=g.fp8_gemm_efficiency or g.gemm_efficiency,
        attention_efficiency=g.attention_efficiency,
        memory_bandwidth_efficiency=g.memory_bandwidth_efficiency,
        kernel_overhead_s=g.kernel_overhead_us * US,
        framework_memory_bytes=g.framework_memory_GB * GB,
        host_link_bandwidth=g.host_link_GBps * GB if g.host_link_GBps else None,
        comm_overlap_slowdown=g.comm_overlap_slowdown,
        host_launch_s=g.host_launch_us * US, clock_ratio=ratio,
        fp8_any_layout=g.fp8_any_layout,
        fp4_gemm_efficiency=(g.fp4_gemm_efficiency or g.fp8_gemm_efficiency
                             or g.gemm_efficiency),
    )
    cal = cfg.calibration
    note = f"{cfg.name} is {cal.status}: {cal.note}" if cal.status == "uncalibrated" else ""
    return Topology(name=cfg.name, gpu=gpu, tiers=tuple(_tier(t) for t in cfg.tiers),
                    interval_scale=cal.interval_scale, calibration_note=note)


def _tier(t: TierConfig) -> Tier:
    return Tier(
        name=t.name, size=t.size, bandwidth=t.bandwidth_GBps * GB, latency_s=t.latency_us * US,
        efficiency=t.efficiency, oversubscription=t.oversubscription,
        nvls_busbw=t.nvls_busbw_GBps * GB if t.nvls_busbw_GBps else None,
        alltoall_efficiency=t.alltoall_efficiency or t.efficiency,
        half_bandwidth_bytes=t.half_bandwidth_MB * MB, curve_exponent=t.curve_exponent,
        deepep_efficiency=t.deepep_efficiency or t.alltoall_efficiency or t.efficiency,
        curve_ranks=t.curve_ranks or 0, base_latency_s=t.base_latency_us * US,
        nvls_ranks=t.nvls_ranks or 0, nvls_link_bound=t.nvls_link_bound,
        ll_busbw=t.ll_busbw_GBps * GB if t.ll_busbw_GBps else 0.0,
        full_mesh=t.full_mesh,
    )
