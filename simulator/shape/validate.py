"""The full plan check: the configuration's own cross-field rules, then the plan's shape.

:func:`simulator.config.validate.check_config` relates fields to each other and
to the cluster without knowing how a plan is laid out. The rules that need
the layout live here, one layer up, because only ``shape`` knows it:

* the schedule accepts ``(pipeline, micro-batches, virtual_pipeline)``
  (:meth:`simulator.schedules.Schedule.check`: interleaving needs ``m % p == 0``,
  DualPipe an even ``p`` and ``m >= 2p``, ...);
* the layer split of :func:`.partition.partition_layers` is valid;
* a pipelined plan's schedule is one its stack's runtime runs (stacks/*.yaml
  ``pipeline.schedules``: DeepSpeed's engine runs only its 1F1B ``TrainSchedule``);
* a context-parallel plan's algorithm is one its stack has (``context_parallel.algorithms``:
  DeepSpeed's sequence parallelism is Ulysses);
* LoRA (``training.peft``) is asked only of what it is costed for
  (:func:`.lora.problem`: dense, standard attention, 16-bit);
* parameters per GPU stay below :data:`MAX_PARAMS_PER_GPU` (a plan over it
  does not fit any GPU by far).

Every caller that validates a plan (``resolve``, the sweep, the search) calls
:func:`check_plan` here. Each rule raises :class:`~simulator.errors.ConfigError`.
"""

from __future__ import annotations

from ..config.stacks import run_stack
from ..config.topology import TopologyConfig
from ..config.validate import check_config
from ..config.workload import Workload
from ..errors import ConfigError
from ..schedules import SCHEDULES, schedule_of
from .lora import problem as lora_problem
from .params import stage_params
from .partition import partition_layers

MAX_PARAMS_PER_GPU = 1e12  # 2 TB of bf16 weights, ten times any GPU's memory


def check_plan(w: Workload, topo: TopologyConfig) -> None:
    """Raise ConfigError for the first rule the plan breaks."""
    check_config(w, topo)
    bad = lora_problem(w)
    if bad is not None:
        field, why = bad
        raise ConfigError(field, getattr(w.training, field.split(".")[-1]), why)
    par = w.parallelism
    _check_stack_schedule(w)
    _check_stack_context(w)
    schedule_of(par).check(par.pipeline, w.num_microbatches, par.vp)
    _check_params(w)


def _check_stack_schedule(w: Workload) -> None:
    """A pipelined plan's schedule is one its stack's runtime runs (``pipeline.schedules``)."""
    par = w.parallelism
    runs = run_stack(w.training).pipeline_schedules
    unknown = [n for n in runs or () if n not in SCHEDULES]
    if unknown:
        own = "pipeline.schedules" in (getattr(w.training, "stack_settings", None) or {})
        raise ConfigError("training.stack_settings.pipeline.schedules" if own else
                          f"stacks/{w.training.stack}.yaml pipeline.schedules", list(runs),
                          f"names from {', '.join(sorted(SCHEDULES))}")
    if par.pipeline > 1 and runs is not None and par.pipeline_schedule not in runs:
        raise ConfigError("parallelism.pipeline_schedule", par.pipeline_schedule,
                          f"{' or '.join(runs)}: stack {w.training.stack}'s pipeline "
                          f"runtime runs no other (stacks/{w.training.stack}.yaml "
                          f"pipeline.schedules)")


def _check_stack_context(w: Workload) -> None:
    """A context-parallel plan's algorithm is one its stack has
    (``context_parallel.algorithms``)."""
    par = w.parallelism
    has = run_stack(w.training).cp_algorithms
    if par.context > 1 and has is not None and par.context_parallel_algo not in has:
        raise ConfigError("parallelism.context_parallel_algo", par.context_parallel_algo,
                          f"{' or '.join(has)} under context parallelism: stack "
                          f"{w.training.stack} has no other (stacks/{w.training.stack}.yaml "
                          f"context_parallel.algorithms)")


def _check_params(w: Workload) -> None:
    part = partition_layers(w)
    deepest = max(range(part.num_stages), key=part.stage_layers)
    for stage in sorted({0, deepest, part.num_stages - 1}):  # embedding, layers, output
        n = stage_params(w, part, stage).total
        if n > MAX_PARAMS_PER_GPU:
            raise ConfigError("model", f"{n:.3g} parameters per GPU on stage {stage}",
                              f"at most {MAX_PARAMS_PER_GPU:.0e} are modelled (2 TB of bf16 "
                              "weights): add tensor, pipeline or expert parallelism")
