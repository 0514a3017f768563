"""Topology schema: what the cluster *is* (hardware only).

Units are spelled in field names (``bandwidth_GBps``, ``latency_us``) and
converted to SI exactly once, in :mod:`simulator.hardware`. Every calibration
constant carries its source in the ``sources`` map of its block.
"""

from __future__ import annotations

from typing import Literal

from ..errors import ConfigError
from .bounds import integer, real
from .schema import Field, Schema, check

# Ranges in the unit of each field name. They are wide (a million times beyond
# any real part either way) and exist so that a typo gets a clear error instead
# of an overflow to infinity or a division by zero in the cost models.
Rate = real(ge=1e-6, le=1e9)  # a peak, a bandwidth, a capacity
Fraction = real(ge=1e-6, le=1)  # an achieved fraction of a peak
Amount = real(ge=0, le=1e9)  # a latency, an overhead, a size offset
MAX_GPUS = 2**40
GPUCount = integer(gt=0, le=MAX_GPUS)
Unit = real(ge=0, le=1)  # a fraction that may be zero
Oversubscription = real(ge=1, le=1e6)
Exponent = real(gt=0, le=10)
Slowdown = real(ge=0, le=100)
PUE = real(ge=1, le=10)


class PeakTFLOPs(Schema):
    """Dense (no 2:4 sparsity) peak tensor-core throughput, TFLOP/s."""

    bf16: Rate
    fp16: Rate | None = None  # default: bf16
    fp8: Rate | None = None  # None: no FP8 tensor cores
    fp4: Rate | None = None  # NVFP4 (E2M1, block-scaled); None: no FP4 tensor cores
    fp32: Rate | None = None


class GPUConfig(Schema):
    """One accelerator: peaks from the datasheet, efficiencies from measurement."""

    name: str
    peak_tflops: PeakTFLOPs
    hbm_GB: Rate  # the datasheet's marketing size (decimal GB)
    # What CUDA exposes (nvidia-smi "Total", MiB): the capacity plans are checked against.
    # None: hbm_GB decimal GB.
    hbm_usable_MiB: Rate | None = None
    # GPU <-> host link, GB/s per direction (PCIe or NVLink-C2C): activation offloading.
    host_link_GBps: Rate | None = None
    hbm_bandwidth_TBps: Rate
    # Achievable fractions (0..1] of peak, each sourced in `sources`.
    gemm_efficiency: Fraction = 0.8
    gemm_half_dim: Amount = 96.0  # dim at which one GEMM axis halves efficiency
    fp8_gemm_efficiency: Fraction | None = None
    fp4_gemm_efficiency: Fraction | None = None  # of the fp4 peak; None: the FP8 one
    attention_efficiency: Fraction = 0.6
    memory_bandwidth_efficiency: Fraction = 0.85
    kernel_overhead_us: Amount = 4.0  # launch + tail per kernel
    # CPU time to issue one kernel from the training framework (PyTorch eager + Megatron
    # Python) on the node CPU; bounds steps whose kernels are short (workload/moe/host.py).
    host_launch_us: Amount = 0.0
    # Bytes the framework holds outside the model's tensors: CUDA context, NCCL
    # communicator buffers, cuBLAS/TE workspaces, caching-allocator fragmentation.
    framework_memory_GB: Amount = 3.0
    # Fraction of compute throughput lost while a collective runs beside it (the SMs
    # and HBM bandwidth NCCL's kernels take); 0 = overlap is free.
    comm_overlap_slowdown: Unit = 0.0
    # Board power limit (nvidia-smi -pl), W; None: the TDP (power.gpu_tdp_W). Below the TDP
    # the sustained SM clock and every compute-bound FLOP/s drop (hardware/power.py).
    power_limit_W: Rate | None = None
    # Whether the FP8 tensor cores take every operand layout (compute capability >= 10:
    # Blackwell), so per-tensor-scaled FP8 keeps no transposed copies (memory/states.py).
    # False: Hopper's TN-only FP8 GEMMs.
    fp8_any_layout: bool = False
    sources: dict[str, str] = Field(default_factory=dict)


class TierConfig(Schema):
    """One level of the network: a domain of ``size`` GPUs and its links.

    ``bandwidth_GBps`` is per GPU, per direction, at line rate. ``efficiency``
    is the fraction a ring collective achieves at large messages; the
    small-message curve is ``1 / (1 + (half_bandwidth_MB / S)**curve_exponent)``.
    """

    name: str
    size: GPUCount
    bandwidth_GBps: Rate
    latency_us: Amount = 5.0
    efficiency: Fraction = 0.8
    oversubscription: Oversubscription = 1.0
    nvls_busbw_GBps: Rate | None = None  # NVLink SHARP all-reduce peak busbw
    # Group size nvls_busbw_GBps was measured at (unset: busbw the same at every size). Set,
    # the NVLS algorithm bandwidth S/t is what stays constant (each GPU moves S in and S out
    # of the switch whatever the group size): busbw scales as 2(n-1)/n over 2(N-1)/N.
    nvls_ranks: GPUCount | None = None
    # With nvls_ranks set: each GPU's own link bounds NVLS, carrying S(1 + 1/n) each way (the
    # multimem reduce reads S out and S/n back, the multicast store S/n out and S back), so
    # the algorithm bandwidth grows as n/(n+1) and busbw as (n-1)/(n+1) (one NVSwitch domain).
    nvls_link_bound: bool = False
    alltoall_efficiency: Fraction | None = None
    # Fraction of line rate DeepEP's dispatch/combine kernels reach on this tier
    # (moe/dispatcher.py); default: alltoall_efficiency.
    deepep_efficiency: Fraction | None = None
    half_bandwidth_MB: Amount = 16.0
    curve_exponent: Exponent = 0.8
    # Group-size-aware curve (0 / unset: off). ``curve_ranks``: the group size at which
    # half_bandwidth_MB holds; the curve then sees the per-rank shard S * curve_ranks / n
    # (a ring or NVLS step moves S/n per rank). ``base_latency_us``: fixed per-collective
    # latency added once to the per-step terms (NCCL tuning.cc baseLat + nsteps * hwLat).
    curve_ranks: GPUCount | None = None
    base_latency_us: Amount = 0.0
    # NCCL's low-latency (LL) protocol: no pipeline ramp, a fraction of the link (NCCL
    # tuning.cc: ring LL busBw = 1/4 of Simple); a ring takes the faster protocol.
    ll_busbw_GBps: Rate | None = None
    # The domain's GPUs are wired to each other directly, one link bundle per peer, with no
    # switch (AMD MI300X / MI355X xGMI): ``bandwidth_GBps`` is the sum over
    # the ``size - 1`` peers, and a group of ``l`` GPUs in one domain reaches only the
    # ``l - 1`` bundles to its own members (ROCm/rccl README, "Improving performance on MI300
    # when using less than 8 GPUs"). Innermost tier only; no NVLS (no switch to reduce in).
    full_mesh: bool = False
    sources: dict[str, str] = Field(default_factory=dict)


NonNegative = real(ge=0, le=1e9)  # a rate, a time, a power
Share = Unit


class ReliabilityConfig(Schema):
    """Variability inside a step and failures over a run (all zero: an ideal cluster).

    Variability (:mod:`simulator.metrics.variability`): every GPU's phase time is the
    ideal one times a log-normal factor ``exp(jitter_sigma * Z)``; a fraction
    ``slow_node_fraction`` of nodes is persistently ``slow_node_slowdown`` slower; every node
    adds an exponential host / synchronisation delay of mean ``host_noise_s`` per step, and the
    step waits for the slowest node; at every job-wide barrier inside the step (FP8 delayed
    scaling's amax all-reduce) each replica (its TP ranks arrive together) arrives an
    exponential ``sync_noise_s`` late on average, and the barrier waits for the last one. Failures
    (:mod:`simulator.reliability.failures`): Poisson rates per GPU-day, node-day, link-day (one
    link per GPU: its NIC, cable and switch port) and GPU-day for software causes that stop the
    whole job (any rank can start one), and the restart time after each.
    """

    gpus_per_node: GPUCount | None = None  # None: tiers[0].size
    jitter_sigma: Unit = 0.0
    host_noise_s: NonNegative = 0.0
    sync_noise_s: NonNegative = 0.0
    slow_node_fraction: Share = 0.0
    slow_node_slowdown: Slowdown = 0.0
    gpu_failures_per_gpu_day: NonNegative = 0.0
    node_failures_per_node_day: NonNegative = 0.0
    link_failures_per_gpu_day: NonNegative = 0.0
    software_failures_per_gpu_day: NonNegative = 0.0
    restart_s: NonNegative = 0.0
    sources: dict[str, str] = Field(default_factory=dict)


class StorageConfig(Schema):
    """Checkpoint storage: per-node links and the file system's aggregate bandwidth (GB/s).

    A checkpoint write runs at ``min(nodes * node_write_GBps, aggregate_write_GBps)``; an
    asynchronous save blocks training only for the device-to-host copy at
    ``snapshot_GBps_per_gpu``. ``None``: no storage described (checkpoints cost nothing).
    """

    node_write_GBps: Rate | None = None
    node_read_GBps: Rate | None = None
    aggregate_write_GBps: Rate | None = None
    aggregate_read_GBps: Rate | None = None
    snapshot_GBps_per_gpu: Rate | None = None
    sources: dict[str, str] = Field(default_factory=dict)


class PowerConfig(Schema):
    """Electrical power (W): GPU by phase, the rest of the node, the network, facility PUE.

    A GPU draws ``gpu_compute_fraction * gpu_tdp_W`` while it computes and
    ``gpu_idle_fraction * gpu_tdp_W`` while it waits (bubble, exposed communication,
    checkpoint, restart); each node adds ``node_other_W`` (CPUs, DRAM, NICs, fans,
    NVSwitches) and each GPU ``network_W_per_gpu`` of switch ports and optics. Facility
    energy is IT energy times ``pue``. ``gpu_tdp_W`` ``None``: no power described.
    """

    gpu_tdp_W: Rate | None = None
    gpu_compute_fraction: Share = 1.0
    gpu_idle_fraction: Share = 0.0
    node_other_W: NonNegative = 0.0
    network_W_per_gpu: NonNegative = 0.0
    pue: PUE = 1.0
    # Dynamic power vs SM clock, P_dyn ~ f**k (hardware/power.py); 3: f * V**2 with V ~ f.
    dvfs_exponent: Exponent = 3.0
    sources: dict[str, str] = Field(default_factory=dict)


Radix = integer(ge=2, le=1_000_000)
PerUnit = integer(ge=0, le=1_000_000)


class FabricConfig(Schema):
    """The network's hardware, for its bill of materials (:mod:`simulator.capacity.bom`).

    Scale-up: ``scaleup_switches_per_domain`` switches (NVSwitch chips or NVLink switch
    trays) in each ``tiers[0]`` domain; their power is part of ``power.node_other_W``.
    Scale-out: a folded-Clos (fat tree) of ``switch_radix``-port switches at ``port_Gbps``
    per port, each GPU on ``tiers[1].bandwidth_GBps * 8 / port_Gbps`` ports; switch power
    ``switch_power_W`` without optics; every scale-out link is optical, with a switch-side
    transceiver of ``transceiver_ports`` ports at ``transceiver_power_W`` per switch end
    and a NIC-side one of ``nic_transceiver_ports`` ports at ``nic_transceiver_power_W``.
    Each field ``None``: unknown (the bill of materials says so; energy keeps
    ``power.network_W_per_gpu``).
    """

    gpus_per_rack: GPUCount | None = None
    scaleup_switch: str = ""
    scaleup_switches_per_domain: PerUnit | None = None
    switch: str = ""
    switch_radix: Radix | None = None
    port_Gbps: Rate | None = None
    switch_power_W: NonNegative | None = None
    transceiver_ports: GPUCount = 1
    transceiver_power_W: NonNegative | None = None
    nic_transceiver_ports: GPUCount = 1
    nic_transceiver_power_W: NonNegative | None = None
    sources: dict[str, str] = Field(default_factory=dict)


IntervalScale = real(ge=1, le=100)


class CalibrationConfig(Schema):
    """How the topology's constants were obtained (issue 31).

    ``status``: ``validated`` (fitted on published training cases, the default),
    ``uncalibrated`` (datasheet peaks, efficiencies carried or estimated: no training
    measurement on this hardware) or ``calibrated`` (fitted by ``clustersim calibrate`` on a
    user's measurements). ``interval_scale`` (>= 1) widens the cross-validated step-time
    interval in log space; ``note`` is printed by ``clustersim run``.
    """

    status: Literal["validated", "uncalibrated", "calibrated"] = "validated"
    note: str = ""
    interval_scale: IntervalScale = 1.0
    sources: dict[str, str] = Field(default_factory=dict)


class TopologyConfig(Schema):
    """A cluster: one GPU type and an ordered list of network tiers, innermost first.

    ``reliability``, ``storage`` and ``power`` describe the cluster over a whole run
    (variability, failures, checkpoint storage, energy); each defaults to "absent", which
    leaves the one-step model exactly as it is. ``fabric`` (the network's switches and
    optics) feeds only the bill of materials of ``clustersim capacity``.
    """

    name: str
    description: str = ""
    gpu: GPUConfig
    tiers: list[TierConfig] = Field(min_length=1)
    reliability: ReliabilityConfig = ReliabilityConfig()
    storage: StorageConfig = StorageConfig()
    power: PowerConfig = PowerConfig()
    fabric: FabricConfig = FabricConfig()
    calibration: CalibrationConfig = CalibrationConfig()

    @check
    def _check(self) -> None:
        for i, tier in enumerate(self.tiers):
            if tier.nvls_link_bound and not (tier.nvls_busbw_GBps and tier.nvls_ranks):
                raise ConfigError(f"tiers[{i}].nvls_link_bound", True,
                                  "needs nvls_busbw_GBps and the nvls_ranks it was measured at")
            if tier.full_mesh and i > 0:
                raise ConfigError(f"tiers[{i}].full_mesh", True,
                                  "only the innermost tier (tiers[0], the scale-up domain) "
                                  "can be a directly wired mesh")
            if tier.full_mesh and (tier.nvls_busbw_GBps or tier.size < 2):
                raise ConfigError(f"tiers[{i}].full_mesh", True,
                                  "needs size >= 2 and no nvls_busbw_GBps (a mesh has no "
                                  "switch to reduce in)")
        for i in range(1, len(self.tiers)):
            inner, outer = self.tiers[i - 1], self.tiers[i]
            if outer.size % inner.size:
                raise ConfigError(f"tiers[{i}].size", outer.size,
                                  f"must be a multiple of tiers[{i - 1}].size ({inner.size})")

    @property
    def max_gpus(self) -> int:
        return self.tiers[-1].size
