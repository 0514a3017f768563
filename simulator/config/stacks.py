"""Training-stack profiles: which kernels, overlaps and FP8 casts a software stack runs.

A profile is a shipped YAML document, ``stacks/<name>.yaml`` (package data like the
topologies: :func:`simulator.config.loader.shipped_dirs`), chosen by ``training.stack``
(default ``megatron``: Megatron-Core + Transformer Engine, the behaviour the GPU constants
were fitted on). Every value carries a ``source`` (document, file or commit). Sections:

* ``attention``: the fused-attention kernel family (``te``: the topology's fitted
  Transformer Engine value; ``fa2``, ``fa3``, ``cudnn``: kernel-benchmark curves in
  :mod:`simulator.compute.attention`), optionally per release;
* ``context_parallel``: whether the ring's softmax merges run beside the next step's
  kernel (Transformer Engine's alternating streams) or after it (``merge_overlapped``), and
  ``algorithms``, the context-parallel algorithms the stack has (unset: any; a plan with
  another is a ConfigError naming ``parallelism.context_parallel_algo``, and ``search`` /
  ``capacity`` give their CP candidates the stack's first);
* ``fsdp``: the sharded-data-parallel implementation and its overlap rules (prefetch depth,
  reshard after forward, reduction dtype, copy kernels; :mod:`simulator.workload.fsdp`);
* ``launch``: whether elementwise ops are fused (TE / Apex kernels, ``torch.compile``) or
  run eagerly as several kernels, as bytes multipliers per op (:mod:`simulator.workload.ops`);
* ``fp8``: HBM bytes per element of the recipe's casts (:mod:`simulator.workload.fp8`),
  and whether the output projection is an FP8 linear (``output_layer_fp8``; unset: it
  runs in the run's precision);
* ``pipeline``: whether pipeline transfers run in line on the compute stream as rendezvous
  (DeepSpeed's engine and TrainSchedule) or beside the next phase (Megatron-Core;
  :mod:`simulator.workload.blocking_p2p`), and ``lockstep``, whether each time slot's
  transfers are waited for before the next slot (PyTorch's multi-stage runtime up to v2.9;
  :mod:`simulator.engine.lockstep`), and ``schedules``, the pipeline schedules its runtime
  runs (unset: any the simulator has; a plan with another is a ConfigError naming
  ``parallelism.pipeline_schedule``, and ``search`` / ``capacity`` try only these);
* ``moe``: ``probs_in_activation``, whether the routing probabilities scale the experts'
  activation output (Megatron-Core 0.13+) rather than the expert outputs in the combine, which
  must then keep those outputs for the probabilities' gradient (unset: they are kept;
  :mod:`simulator.memory.activations`);
* ``recompute``: ``selective_modules``, what ``training.recompute: selective`` recomputes on
  this stack when the run names no ``recompute_modules`` (Megatron-Core's ``[core_attn]``
  unless stated; torchtitan's selective checkpointing is its per-op policy, ``[op_sac]``);
  ``search`` and ``capacity`` try that as a plan's selective candidate;
* ``peft``: ``lora_dropout_position``, where a LoRA adapter's dropout acts when the run
  does not set ``training.lora_dropout_position`` (``pre``, on the adapter's input, unless
  stated; NeMo AutoModel's ``post``, on its output);
* ``efficiency``: per-stack factors fitted on that stack's published runs (empty unless
  measurements exist; see validation/stacks/README.md): ``pipeline_engine``, how many times
  the simulator's kernel time each forward and backward phase of a pipelined run takes in
  the stack's pipeline runtime (:func:`simulator.workload.plan.scale_pipeline_phases`);
* ``releases``: values a release had that differ from the profile's (release prefix ->
  ``{value: {"section.key": value}, source}``), e.g. a default changed between releases;
* ``recipes``: values an FP8 recipe has that differ from the profile's default one (recipe
  name -> ``{value: {"section.key": value}, source}``), applied after the release's when the
  run's ``training.fp8_recipe`` is that name, e.g. torchao's rowwise scaling (other casts, a
  bf16 all-gather, a rescale after the backward GEMMs). A recipe of one library
  (:data:`simulator.precision.STACK_RECIPES`) runs only on a stack whose profile prices it.

A run's own settings override the profile (:func:`run_stack`): ``training.stack_release``
picks the release's values, ``training.attention_family`` the attention kernel the run
configured (e.g. a Hugging Face ``attn_implementation``; a family other than ``te``
under context parallelism runs in PyTorch's ring, whose merges are not overlapped), and
``training.torch_compile: true`` drops the eager elementwise factors (``torch.compile``
fuses each norm, RoPE and SwiGLU into one kernel that reads and writes each element once,
as the torchtitan profile states), and ``training.stack_settings`` (``"section.key":
value``, the keys of :data:`KEYS`) sets the values a recipe configured otherwise (e.g.
NeMo AutoModel's MoE parallelizer keeping gathered weights after the forward), applied
after the release's.
"""

from __future__ import annotations

import copy
import json
import typing
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

import yaml

from ..errors import ConfigError
from ..precision import RECIPES, STACK_RECIPES
from .loader import shipped_dirs, shipped_names
from .recompute import DEFAULT_MODULES, MODULES
from .workload import ParallelConfig

DEFAULT = "megatron"
FAMILIES = ("te", "fa2", "fa3", "cudnn", "triton")
FSDP_IMPLS = ("megatron_fsdp", "fsdp2", "fsdp1", "zero3")
# how reports name each implementation
FSDP_NAMES = {"megatron_fsdp": "Megatron-FSDP", "fsdp2": "FSDP2", "fsdp1": "FSDP1",
              "zero3": "ZeRO-3"}


@dataclass(frozen=True)
class Stack:
    """One stack profile, in SI units; see the module docstring for the sections."""

    name: str
    attention_family: str = "te"
    attention_by_release: tuple[tuple[str, str], ...] = ()  # (release prefix, family)
    fsdp_impl: str = "megatron_fsdp"
    prefetch_depth: int = 1
    reshard_after_forward: bool = True
    reduce_dtype: str | None = None  # None: the workload's grad_reduce_in_fp32 decides
    fsdp_copy_bytes_per_param: float = 0.0  # HBM bytes of copy-out per gathered param
    fsdp_reduce_copy_bytes_per_param: float = 0.0  # HBM bytes of copy-in per reduced param
    fsdp_units_per_layer: int = 1  # separate gather / reduce units per decoder layer
    float8_all_gather: bool = False  # FP8 weights gathered at 1 B per parameter
    # under pipeline parallelism: gradients reduce-scattered once per schedule, after the
    # stage's last backward (PyTorch pipelining's no-sync backwards), not per micro-batch
    sync_once_per_schedule: bool = False
    # reshard_after_forward under pipeline parallelism where it differs (torchtitan's
    # "default": not under PP); None: the same
    reshard_after_forward_pp: bool | None = None
    elementwise: dict[str, float] = field(default_factory=dict)  # op name -> bytes factor
    fp8_input_bytes: float | None = None  # None: Transformer Engine's (workload/fp8.py)
    fp8_norm_fused_input_bytes: float | None = None
    fp8_grad_bytes: float | None = None
    fp8_weight_bytes: float | None = None
    fp8_weight_per_microbatch: bool = False
    # whether an FP8 primary weight's transpose is made in each backward and kept only when
    # the library is given is_first_microbatch (Transformer Engine 1.x); False: once made it
    # stays on the weight tensor (TE 2); memory/states.py fp8_copy_bytes
    fp8_weight_transpose_in_backward: bool = False
    # bytes of input_bytes / weight_bytes spent on the column-major FP8 copies the backward
    # makes (workload/fp8.py cast_op): charged to the backward, not re-run by recompute
    fp8_backward_transpose_bytes: float = 0.0
    # bytes per element of each backward GEMM's output spent rescaling it after the GEMM
    # (a recipe whose backward GEMMs run unscaled and multiply the scales in afterwards)
    fp8_backward_rescale_bytes: float = 0.0
    # whether the output (vocabulary) projection is an FP8 linear; None: timed in the
    # run's precision, as the GPU constants were fitted (workload/ops.py output_forward)
    fp8_output_layer: bool | None = None
    cp_merge_overlapped: bool = False  # ring merges hidden beside the next step's kernel
    # the context-parallel algorithms the stack has (parallelism.context_parallel_algo
    # values); None: any
    cp_algorithms: tuple[str, ...] | None = None
    blocking_p2p: bool = False  # pipeline transfers hold the compute stream (rendezvous)
    # each pipeline time slot's transfers are waited for before the next slot (PyTorch's
    # PipelineScheduleMulti runtime up to v2.9; simulator/engine/lockstep.py)
    pipeline_lockstep: bool = False
    # the pipeline schedules the stack's runtime runs (simulator.schedules names); None: any
    pipeline_schedules: tuple[str, ...] | None = None
    # MoE: routing probabilities scale the experts' activation output (so the combine keeps no
    # expert output for their gradient) instead of the expert output in the combine
    moe_probs_in_activation: bool = False
    # what the ``selective`` shorthand recomputes on this stack (config/recompute.py MODULES)
    selective_modules: tuple[str, ...] = DEFAULT_MODULES
    # where a LoRA adapter's dropout acts when the run does not say: on its input ("pre",
    # Megatron-Bridge's LoRA default) or on its output ("post", NeMo AutoModel's)
    lora_dropout_position: str = "pre"
    efficiency: dict[str, float] = field(default_factory=dict)

    def reshards(self, pipeline: int) -> bool:
        """Whether gathered weights are freed after the forward, for a plan of ``pipeline``
        stages (``reshard_after_forward``, or ``reshard_after_forward_pp`` under PP)."""
        if pipeline > 1 and self.reshard_after_forward_pp is not None:
            return self.reshard_after_forward_pp
        return self.reshard_after_forward

    def attention_for(self, release: str | None) -> str:
        """The attention family of ``release`` (first matching prefix), else the default."""
        for prefix, fam in self.attention_by_release:
            if release and str(release).startswith(prefix):
                return fam
        return self.attention_family


def _value(doc: dict, section: str, key: str, default: Any) -> Any:
    sec = doc.get(section) or {}
    item = sec.get(key, default)
    return item["value"] if isinstance(item, dict) and "value" in item else item


# Every key a profile may state, by section, with the type a run's setting must have
# ("bool", "number": 0..MAX_SETTING, "count": a whole number 0..MAX_COUNT, "units": 1..
# MAX_COUNT, "name" (a string), "names": {name: name}, "factors": {op name: number
# 0..MAX_SETTING}); tests/test_stacks.py holds every shipped profile to it.
KEYS: dict[str, dict[str, str]] = {
    "attention": {"family": "name", "by_release": "names"},
    "context_parallel": {"merge_overlapped": "bool", "algorithms": "algorithms"},
    "fsdp": {"implementation": "name", "prefetch_depth": "count",
             "reshard_after_forward": "bool", "reduce_dtype": "name",
             "copy_bytes_per_param": "number", "reduce_copy_bytes_per_param": "number",
             "units_per_layer": "units", "float8_all_gather": "bool",
             "sync_once_per_schedule": "bool", "reshard_after_forward_pp": "bool"},
    "launch": {"elementwise_bytes_factor": "factors"},
    "fp8": {"recipe": "name", "input_bytes": "number", "norm_fused_input_bytes": "number",
            "grad_bytes": "number", "weight_bytes": "number", "output_layer_fp8": "bool",
            "backward_transpose_bytes": "number", "weight_per_microbatch": "bool",
            "backward_rescale_bytes": "number", "weight_transpose_in_backward": "bool"},
    "pipeline": {"blocking_p2p": "bool", "lockstep": "bool", "schedules": "schedules"},
    "moe": {"probs_in_activation": "bool"},
    "recompute": {"selective_modules": "modules"},
    "peft": {"lora_dropout_position": "name"},
    "efficiency": {"pipeline_engine": "number"},
}
_SECTIONS = tuple(KEYS)
MAX_SETTING = 1000.0  # bytes per element / parameter, or a bytes factor
MAX_COUNT = 64


_MODULES_ALLOWED = (f"a non-empty list of recompute modules from {', '.join(MODULES)} "
                    f"(op_sac alone)")


def _modules_ok(value: Any) -> bool:
    """Whether ``value`` is a list of selective recompute modules a run could name
    (config/workload.py's ``recompute_modules`` rules: known names, op_sac alone)."""
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(m, str) and m in MODULES for m in value)
            and ("op_sac" not in value or len(value) == 1))


def _names_ok(value: Any, allowed: tuple[str, ...] | None = None) -> bool:
    """Whether ``value`` is a non-empty list of names (each in ``allowed`` where given)."""
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(v, str) and v and (allowed is None or v in allowed)
                    for v in value))


# pipeline schedule names: that each is one the simulator runs is checked with the plan, one
# layer up (simulator.shape.validate), where the schedules are known
_SCHEDULES_ALLOWED = ("a non-empty list of pipeline schedule names "
                      "(parallelism.pipeline_schedule values)")
CP_ALGORITHMS = typing.get_args(ParallelConfig.model_fields["context_parallel_algo"].annotation)
_ALGORITHMS_ALLOWED = f"a non-empty list from {', '.join(CP_ALGORITHMS)}"


def _check_sources(name: str, doc: dict) -> None:
    """Every value of a profile states its source (``{value: ..., source: ...}``)."""
    for section in _SECTIONS:
        for key, item in (doc.get(section) or {}).items():
            if not (isinstance(item, dict) and item.get("source")):
                raise ConfigError(f"stacks/{name}.yaml {section}.{key}", item,
                                  "must be {value: ..., source: ...} with a source")


def _optional_bool(name: str, section: str, key: str, value: Any) -> bool | None:
    """``value`` as a bool, None if unset; ConfigError for anything else."""
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(f"stacks/{name}.yaml {section}.{key}", value, "must be true or false")


def _transpose_bytes(name: str, doc: dict, fp8: dict) -> float:
    """``fp8.backward_transpose_bytes``: 0..min(input_bytes, weight_bytes) when set."""
    value = float(_value(doc, "fp8", "backward_transpose_bytes", 0.0) or 0.0)
    parts = [fp8[k] for k in ("input_bytes", "norm_fused_input_bytes", "weight_bytes")
             if fp8[k] is not None]
    if value < 0 or (value > 0 and (not parts or value > min(parts))):
        raise ConfigError(f"stacks/{name}.yaml fp8.backward_transpose_bytes", value,
                          "must be >= 0 and at most the input and weight cast bytes it is "
                          "part of (input_bytes, norm_fused_input_bytes, weight_bytes)")
    return value


# the range a stack's fitted phase-time factor may take (a factor outside it is not a
# runtime's efficiency but a missing model)
EFFICIENCY_RANGE = (0.5, 2.0)


def _efficiency(name: str, doc: dict) -> dict[str, float]:
    """``efficiency``: each fitted factor, within :data:`EFFICIENCY_RANGE`."""
    out = {}
    for key in doc.get("efficiency") or {}:
        value = _value(doc, "efficiency", key, None)
        lo, hi = EFFICIENCY_RANGE
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                and lo <= value <= hi):
            raise ConfigError(f"stacks/{name}.yaml efficiency.{key}", value,
                              f"must be a number from {lo:g} to {hi:g}")
        out[key] = float(value)
    return out


def parse(name: str, doc: dict) -> Stack:
    """A :class:`Stack` from a profile document (validated; ConfigError names the field)."""
    _check_sources(name, doc)
    fam = _value(doc, "attention", "family", "te")
    by_rel = tuple((str(k), str(v)) for k, v in
                   (_value(doc, "attention", "by_release", {}) or {}).items())
    for f in (fam, *(v for _, v in by_rel)):
        if f not in FAMILIES:
            raise ConfigError(f"stacks/{name}.yaml attention.family", f,
                              f"must be one of {', '.join(FAMILIES)}")
    reduce = _value(doc, "fsdp", "reduce_dtype", None)
    if reduce not in (None, "fp32", "bf16"):
        raise ConfigError(f"stacks/{name}.yaml fsdp.reduce_dtype", reduce,
                          "must be fp32 or bf16")
    impl = _value(doc, "fsdp", "implementation", "megatron_fsdp")
    if impl not in FSDP_IMPLS:
        raise ConfigError(f"stacks/{name}.yaml fsdp.implementation", impl,
                          f"must be one of {', '.join(FSDP_IMPLS)}")
    depth = int(_value(doc, "fsdp", "prefetch_depth", 1))
    if depth < 0:
        raise ConfigError(f"stacks/{name}.yaml fsdp.prefetch_depth", depth, "must be >= 0")
    fp8 = {k: _value(doc, "fp8", k, None) for k in
           ("input_bytes", "norm_fused_input_bytes", "grad_bytes", "weight_bytes")}
    selective = _value(doc, "recompute", "selective_modules", list(DEFAULT_MODULES))
    if not _modules_ok(selective):
        raise ConfigError(f"stacks/{name}.yaml recompute.selective_modules", selective,
                          f"must be {_MODULES_ALLOWED}")
    schedules = _value(doc, "pipeline", "schedules", None)
    if schedules is not None and not _names_ok(schedules):
        raise ConfigError(f"stacks/{name}.yaml pipeline.schedules", schedules,
                          f"must be {_SCHEDULES_ALLOWED}")
    algorithms = _value(doc, "context_parallel", "algorithms", None)
    if algorithms is not None and not _names_ok(algorithms, CP_ALGORITHMS):
        raise ConfigError(f"stacks/{name}.yaml context_parallel.algorithms", algorithms,
                          f"must be {_ALGORITHMS_ALLOWED}")
    position = _value(doc, "peft", "lora_dropout_position", "pre")
    if position not in ("pre", "post"):
        raise ConfigError(f"stacks/{name}.yaml peft.lora_dropout_position", position,
                          "must be pre or post")
    return Stack(
        name=name, attention_family=fam, attention_by_release=by_rel, fsdp_impl=impl,
        prefetch_depth=depth,
        reshard_after_forward=bool(_value(doc, "fsdp", "reshard_after_forward", True)),
        reduce_dtype=reduce,
        fsdp_copy_bytes_per_param=float(_value(doc, "fsdp", "copy_bytes_per_param", 0.0)),
        fsdp_reduce_copy_bytes_per_param=float(_value(doc, "fsdp", "reduce_copy_bytes_per_param",
                                                      0.0)),
        fsdp_units_per_layer=max(1, int(_value(doc, "fsdp", "units_per_layer", 1))),
        float8_all_gather=bool(_value(doc, "fsdp", "float8_all_gather", False)),
        sync_once_per_schedule=bool(_value(doc, "fsdp", "sync_once_per_schedule", False)),
        reshard_after_forward_pp=_optional_bool(name, "fsdp", "reshard_after_forward_pp",
                                                _value(doc, "fsdp", "reshard_after_forward_pp",
                                                       None)),
        elementwise={k: float(v) for k, v in
                     (_value(doc, "launch", "elementwise_bytes_factor", {}) or {}).items()},
        fp8_input_bytes=fp8["input_bytes"], fp8_norm_fused_input_bytes=fp8[
            "norm_fused_input_bytes"], fp8_grad_bytes=fp8["grad_bytes"],
        fp8_weight_bytes=fp8["weight_bytes"],
        fp8_weight_per_microbatch=bool(_value(doc, "fp8", "weight_per_microbatch", False)),
        fp8_weight_transpose_in_backward=bool(_value(doc, "fp8", "weight_transpose_in_backward",
                                                     False)),
        fp8_backward_transpose_bytes=_transpose_bytes(name, doc, fp8),
        fp8_backward_rescale_bytes=float(_value(doc, "fp8", "backward_rescale_bytes", 0.0)
                                         or 0.0),
        fp8_output_layer=_optional_bool(name, "fp8", "output_layer_fp8",
                                        _value(doc, "fp8", "output_layer_fp8", None)),
        cp_merge_overlapped=bool(_value(doc, "context_parallel", "merge_overlapped", False)),
        cp_algorithms=None if algorithms is None else tuple(algorithms),
        blocking_p2p=bool(_value(doc, "pipeline", "blocking_p2p", False)),
        pipeline_lockstep=bool(_value(doc, "pipeline", "lockstep", False)),
        pipeline_schedules=None if schedules is None else tuple(schedules),
        moe_probs_in_activation=bool(_value(doc, "moe", "probs_in_activation", False)),
        selective_modules=tuple(selective), lora_dropout_position=position,
        efficiency=_efficiency(name, doc))


def stack_names() -> list[str]:
    """Every shipped stack profile name, sorted."""
    return shipped_names("stacks")


def _doc(name: str) -> dict:
    for base in shipped_dirs("stacks"):
        path = base / f"{name}.yaml"
        if path.is_file():
            return yaml.safe_load(path.read_text()) or {}
    raise ConfigError("training.stack", name, f"must be one of {', '.join(stack_names())}")


def _with_entry(name: str, doc: dict, section: str, match: Any) -> dict:
    """``doc`` with the values of the first ``section`` entry (``releases``: whose prefix
    ``match`` starts with; ``recipes``: named ``match``), each ``"section.key": value``
    sourced by the entry's ``source``. Every entry is validated, matched or not."""
    entries = doc.get(section) or {}
    for prefix, item in entries.items():
        if not (isinstance(item, dict) and item.get("source")
                and isinstance(item.get("value"), dict)):
            raise ConfigError(f"stacks/{name}.yaml {section}.{prefix}", item,
                              "must be {value: {section.key: value}, source: ...}")
        for dotted in item["value"]:
            sec, _, key = str(dotted).partition(".")
            if key not in KEYS.get(sec, {}):
                raise ConfigError(f"stacks/{name}.yaml {section}.{prefix}", dotted,
                                  f"must be section.key, one of the profile keys "
                                  f"({', '.join(f'{s}.{k}' for s in KEYS for k in KEYS[s])})")
    for prefix, item in entries.items():
        hit = (str(match).startswith(str(prefix)) if section == "releases"
               else str(match) == str(prefix))
        if match and hit:
            out = copy.deepcopy(doc)
            for dotted, v in item["value"].items():
                sec, _, key = str(dotted).partition(".")
                out.setdefault(sec, {})[key] = {"value": v, "source": item["source"]}
            return out
    return doc


def with_release(name: str, doc: dict, release: str | None) -> dict:
    """``doc`` with the values of the first ``releases`` entry whose prefix ``release``
    starts with (each ``"section.key": value``, sourced by the entry's ``source``)."""
    return _with_entry(name, doc, "releases", release)


def with_recipe(name: str, doc: dict, recipe: str | None) -> dict:
    """``doc`` with the values of its ``recipes`` entry named ``recipe`` (the run's FP8
    recipe where the stack prices it differently from its default one)."""
    return _with_entry(name, doc, "recipes", recipe)


@cache
def stack_recipes(name: str) -> tuple[str, ...]:
    """The FP8 recipes profile ``name`` prices in its own ``recipes`` section (read once: every
    FP8 run asks, several times a simulation)."""
    return tuple(str(k) for k in (_doc(name).get("recipes") or {}))


@cache
def load_stack(name: str = DEFAULT, release: str | None = None,
               recipe: str | None = None) -> Stack:
    """The shipped profile ``name`` (with ``release``'s values where its ``releases``
    section names that release, then FP8 ``recipe``'s where its ``recipes`` section names
    it); ConfigError listing the shipped ones otherwise."""
    doc = _doc(name)
    return parse(name, with_recipe(name, with_release(name, doc, release), recipe))


def _check_setting(dotted: str, value: Any) -> None:
    """ConfigError naming ``training.stack_settings.<dotted>`` unless it is a key of
    :data:`KEYS` with a value of its type."""
    field = f"training.stack_settings.{dotted}"
    section, _, key = str(dotted).partition(".")
    kind = KEYS.get(section, {}).get(key)
    if kind is None:
        known = ", ".join(f"{s}.{k}" for s, keys in KEYS.items() for k in keys)
        raise ConfigError(field, value, f"must be one of the profile keys: {known}")
    def number(v: Any, low: float = 0.0, high: float = MAX_SETTING) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and low <= v <= high

    def whole(v: Any, low: int) -> bool:
        return number(v, low, MAX_COUNT) and float(v).is_integer()

    ok = {"bool": isinstance(value, bool), "number": number(value),
          "count": whole(value, 0), "units": whole(value, 1),
          "name": isinstance(value, str),
          "names": isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in value.items()),
          "factors": isinstance(value, dict) and all(number(v) for v in value.values()),
          "modules": _modules_ok(value), "schedules": _names_ok(value),
          "algorithms": _names_ok(value, CP_ALGORITHMS)}[kind]
    if not ok:
        allowed = {"bool": "true or false", "number": f"a number from 0 to {MAX_SETTING:g}",
                   "count": f"a whole number from 0 to {MAX_COUNT}",
                   "units": f"a whole number from 1 to {MAX_COUNT}", "name": "a name",
                   "names": "a mapping of names to names",
                   "factors": f"a mapping of op name to a number from 0 to "
                              f"{MAX_SETTING:g}",
                   "modules": _MODULES_ALLOWED, "schedules": _SCHEDULES_ALLOWED,
                   "algorithms": _ALGORITHMS_ALLOWED}[kind]
        raise ConfigError(field, value, f"must be {allowed}")


@cache
def _with_settings(name: str, release: str | None, settings: str,
                   recipe: str | None = None) -> Stack:
    """The profile at ``release`` and FP8 ``recipe`` with a run's settings (``settings``:
    sorted JSON)."""
    values = json.loads(settings)
    doc = with_recipe(name, with_release(name, _doc(name), release), recipe)
    doc = copy.deepcopy(doc)
    for dotted, v in values.items():
        section, _, key = dotted.partition(".")
        doc.setdefault(section, {})[key] = {"value": v, "source": "training.stack_settings"}
    try:
        return parse(name, doc)
    except ConfigError as err:  # a value parse rejects: name the run's field
        dotted = err.field.rpartition(" ")[2]
        if dotted in values:
            raise ConfigError(f"training.stack_settings.{dotted}", values[dotted],
                              err.allowed) from None
        raise ConfigError("training.stack_settings", values,
                          f"conflicts with the profile's {dotted} = {err.value!r}, which "
                          f"{err.allowed}") from None


def _run_recipe(training: Any) -> str | None:
    """The run's FP8 recipe where the stack prices it in its ``recipes`` section (None for a
    recipe every stack runs as Transformer Engine does). A recipe only some stacks have
    (:data:`simulator.precision.STACK_RECIPES`, torchao's rowwise scaling) on a stack
    without it is a ConfigError naming ``training.fp8_recipe``."""
    if getattr(training, "precision", None) != "fp8":
        return None
    recipe = getattr(training, "fp8_recipe", None)
    name = getattr(training, "stack", DEFAULT)
    own = stack_recipes(name)
    if recipe in STACK_RECIPES and recipe not in own:
        having = [s for s in stack_names() if recipe in stack_recipes(s)]
        native = ", ".join(r for r in RECIPES if r not in STACK_RECIPES)
        raise ConfigError("training.fp8_recipe", recipe,
                          f"needs a training.stack whose profile prices it "
                          f"({', '.join(having)}); stack {name} runs {native}")
    return recipe if recipe in own else None


def run_stack(training: Any) -> Stack:
    """The profile a run used: ``training.stack`` at ``training.stack_release``, with the
    run's own ``stack_settings``, ``attention_family`` and ``torch_compile`` settings
    (module docstring)."""
    release = getattr(training, "stack_release", None)
    settings = getattr(training, "stack_settings", None) or {}
    recipe = _run_recipe(training)
    if settings:
        for dotted, value in settings.items():
            _check_setting(dotted, value)
        stack = _with_settings(training.stack, release, json.dumps(settings, sort_keys=True),
                               recipe)
    else:
        stack = load_stack(training.stack, release, recipe)
    family = getattr(training, "attention_family", None)
    if family is not None:
        if family not in FAMILIES:
            raise ConfigError("training.attention_family", family,
                              f"must be one of {', '.join(FAMILIES)}")
        # a kernel other than TE's under CP runs in PyTorch's context_parallel ring (SDPA),
        # which merges each step's output on the compute stream after that step's kernel
        # (torch/distributed/tensor/experimental/_attention.py _SDPAMerger.step)
        stack = replace(stack, attention_family=family, attention_by_release=(),
                        cp_merge_overlapped=stack.cp_merge_overlapped and family == "te")
    if getattr(training, "torch_compile", None) is True and stack.elementwise:
        stack = replace(stack, elementwise={})
    return stack
