"""The plan's shape: everything that follows from a workload's sizes alone, computed once.

A workload (model, batch, parallel plan) fixes, before any hardware is known, the
schedule and its send rule, the layer split over (stage, chunk), the parameters per
GPU of each stage and of the whole model, the MLA geometry, the expert-data-parallel
size and the optimizer shards. This package holds them and the cross-field checks
that need them; workload costing, memory, metrics and reports read them here and
recompute none of it. It imports only ``config``, ``errors``, ``moe`` and
``schedules``.

* :mod:`.plan_shape`: :class:`PlanShape` and :func:`plan_shape`, the cached step lists;
* :mod:`.partition`: the layer split (:class:`Partition`);
* :mod:`.params`: parameters per GPU of a stage (:class:`StageParams`);
* :mod:`.model_params`: the whole model's parameter counts;
* :mod:`.mla`: multi-latent attention geometry;
* :mod:`.validate`: :func:`check_plan`, the rules that need the layout.
"""

from __future__ import annotations

from .model_params import ModelParams, model_params
from .params import StageParams, expert_data_parallel, layer_params, stage_params
from .partition import Partition, parse_layout, partition_layers
from .plan_shape import (
    PlanShape,
    local_seq,
    microbatch_runs,
    microbatch_tokens,
    plan_shape,
    routed_tokens,
    schedule_route,
    schedule_steps,
)
from .validate import check_plan

__all__ = ["ModelParams", "Partition", "PlanShape", "StageParams", "check_plan",
           "expert_data_parallel", "layer_params", "local_seq", "microbatch_runs",
           "microbatch_tokens", "model_params", "parse_layout", "partition_layers",
           "plan_shape", "routed_tokens", "schedule_route", "schedule_steps", "stage_params"]
