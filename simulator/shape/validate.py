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
    _check_stack_support(w)
    schedule_of(par).check(par.pipeline, w.num_microbatches, par.vp)
    _check_params(w)


def _check_stack_support(w: Workload) -> None:
    """A pipelined plan's schedule is one its stack's runtime runs (``pipeline.schedules``),
    and a context-parallel plan's algorithm one its stack has (``context_parallel.algorithms``);
    the profile's schedule names are ones the simulator has."""
    par, stack, name = w.parallelism, run_stack(w.training), w.training.stack
    runs = stack.pipeline_schedules
    if any(n not in SCHEDULES for n in runs or ()):
        own = "pipeline.schedules" in (getattr(w.training, "stack_settings", None) or {})
        raise ConfigError("training.stack_settings.pipeline.schedules" if own else
                          f"stacks/{name}.yaml pipeline.schedules", list(runs),
                          f"names from {', '.join(sorted(SCHEDULES))}")
    for active, value, allowed, field, key, what in (
            (par.pipeline > 1, par.pipeline_schedule, runs, "parallelism.pipeline_schedule",
             "pipeline.schedules", "pipeline runtime runs"),
            (par.context > 1, par.context_parallel_algo, stack.cp_algorithms,
             "parallelism.context_parallel_algo", "context_parallel.algorithms",
             "context parallelism has")):
        if active and allowed is not None and value not in allowed:
            raise ConfigError(field, value, f"{' or '.join(allowed)}: stack {name}'s {what} "
                                            f"no other (stacks/{name}.yaml {key})")


def _check_params(w: Workload) -> None:
    part = partition_layers(w)
    deepest = max(range(part.num_stages), key=part.stage_layers)
    for stage in sorted({0, deepest, part.num_stages - 1}):  # embedding, layers, output
        n = stage_params(w, part, stage).total
        if n > MAX_PARAMS_PER_GPU:
            raise ConfigError("model", f"{n:.3g} parameters per GPU on stage {stage}",
                              f"at most {MAX_PARAMS_PER_GPU:.0e} are modelled (2 TB of bf16 "
                              "weights): add tensor, pipeline or expert parallelism")
