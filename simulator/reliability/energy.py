"""Energy (J) of a run from the time its GPUs compute and the time they wait.

``E_IT = G (P_compute t_compute + P_wait t_wait) + N P_node T + G P_net T`` with G GPUs,
N nodes and T the wall time; a GPU computes while it runs phases (including work redone
after a failure) and waits otherwise (bubble, exposed communication, variability,
checkpoint, restart). Facility energy is ``E_IT * PUE``. Powers come from
``topology.power`` with their sources (GPU TDP from the datasheet, the fraction drawn under
training load from published H100 node measurements); under a board power limit
(``gpu.power_limit_W``) a computing GPU's dynamic draw follows the throttled clock.
"""

from __future__ import annotations

from ..config import TopologyConfig
from ..hardware.power import compute_power_W

MWH = 3.6e9  # J per MWh


def it_energy_J(t: TopologyConfig, num_gpus: int, wall_s: float, compute_s: float) -> float:
    """IT energy (J): GPUs by phase, node rest and network for ``wall_s`` seconds, of which
    each GPU computes ``compute_s`` seconds. 0 when the topology describes no power."""
    pw = t.power
    if pw.gpu_tdp_W is None:
        return 0.0
    nodes = -(-num_gpus // (t.reliability.gpus_per_node or t.tiers[0].size))
    # computing: the compute draw at the clock the board limit sustains (gpu.power_limit_W;
    # the same figure that sets the FLOP/s, simulator/hardware/power.py)
    gpu = (compute_power_W(t) * compute_s
           + pw.gpu_tdp_W * pw.gpu_idle_fraction * (wall_s - compute_s))
    return num_gpus * gpu + (nodes * pw.node_other_W + num_gpus * pw.network_W_per_gpu) * wall_s
