"""Collective communication cost models (NCCL-style), in SI units.

A collective's time is an alpha-beta sum (Thakur, Rabenseifner & Gropp 2005):
per-step latency times the number of synchronous steps, plus the bytes one
rank moves over its bottleneck link divided by that link's bandwidth. What
differs between algorithms is how many steps and which link is the
bottleneck:

* ring: ``2(n-1)`` steps for all-reduce, each rank moves ``2(n-1)/n * S``;
  across nodes NCCL runs one ring per NIC, so a node's NICs aggregate.
* tree (double binary tree): ``2 log2 n`` steps, ``2 S`` moved; wins for
  small messages on many ranks.
* nvls (NVLink SHARP): the NVSwitch reduces in the fabric; bus bandwidth is
  a measured hardware constant of the tier.
* hierarchical: reduce-scatter inside each domain, all-reduce of ``S/l``
  across domains, all-gather inside.
* direct: all-to-all (pairwise exchange; one NIC per GPU across nodes,
  nccl-tests #267) and send/recv.

Bandwidths come from :class:`simulator.hardware.Tier` (``achievable`` times
the small-message curve ``size_efficiency(S)``, S = the nccl-tests buffer).
Sizes follow nccl-tests: ``nbytes`` is the all-reduce vector, the all-gather
output, the reduce-scatter input, the bytes each rank sends in all-to-all.
"""

from .cost import (
                   ALGOS,
                   OPS,
                   algo_bandwidth,
                   alltoall_time_uneven,
                   available_algorithms,
                   best_algorithm,
                   bus_bandwidth,
                   bus_factor,
                   collective_time,
)

__all__ = [
    "ALGOS", "OPS", "algo_bandwidth", "alltoall_time_uneven", "available_algorithms",
    "best_algorithm", "bus_bandwidth", "bus_factor", "collective_time",
]
