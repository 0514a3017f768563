"""Validation cases: published measurements in the project's own input format.

A case file in ``validation/`` is a YAML list of *groups*. A group names the source, the
topology, the category and (for step and layer times) a base workload dict; its rows
(``cases`` or ``points``) give the measured value and the fields that differ, as dotted
``--set``-style overrides. :func:`load_cases` expands every row into one flat :class:`Case`.

Categories and their units (SI, as everywhere in the simulator):

* ``dense_step_time``: seconds per global step.
* ``moe_step_time``: seconds per global step of a mixture-of-experts model (own bars,
  not used for fitting).
* ``collective_busbw``: nccl-tests bus bandwidth, GB/s (a display unit, as the sources).
* ``layer_time``: seconds for one transformer layer's forward (``-fwd``) or backward (``-bwd``).
* ``ep_alltoall``: MoE all-to-all bandwidth, GB/s (DeepEP's own metric; max 15 %).
* ``peak_memory``: peak bytes the framework's allocator held on one GPU, decimal GB
  (``validation/memory.yaml``: Megatron-LM's logged ``torch.cuda.memory_stats()``
  ``allocated_bytes.all.peak``, which leaves out the CUDA context, NCCL's buffers and the
  allocator's slack: the prediction is the stage's total less the framework allowance).

Held-out cases are chosen by a fixed rule, before any constant is fitted: within each
(category, topology) stratum, cases in file order, every third one (3rd, 6th, ...) is held
out (:func:`mark_holdout`). Fitting may use only the others.

Narayanan et al. (2021) publish achieved TFLOP/s counted with their Eq. 3, which includes the
recompute forward; :func:`narayanan_flops` turns it back into a step time so that step times
are what we compare.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ..config import load_workload
from ..errors import ConfigError

CATEGORIES = ("dense_step_time", "moe_step_time", "collective_busbw", "layer_time",
              "ep_alltoall", "peak_memory")
STEP_CATEGORIES = ("dense_step_time", "moe_step_time")
UNITS = {"dense_step_time": "s", "moe_step_time": "s", "collective_busbw": "GB/s",
         "layer_time": "s", "ep_alltoall": "GB/s", "peak_memory": "GB"}
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "validation"


@dataclass(frozen=True)
class Case:
    """One measured number and everything needed to predict it.

    ``measured`` is in the category's unit (:data:`UNITS`). ``spec`` holds what the
    predictor needs: ``workload`` + ``overrides`` (step and layer times, plus ``phase``
    for layers) or ``op``, ``ranks``, ``bytes``, ``stride``, ``algo`` (collectives).
    """

    id: str
    group: str
    category: str
    topology: str
    source: str
    measured: float
    spec: dict[str, Any]
    topology_overrides: dict[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    derived: str = ""  # how `measured` follows from the published figure
    holdout: bool = False
    recipe: dict[str, Any] = field(default_factory=dict)  # the run's memory-relevant settings

    @property
    def unit(self) -> str:
        return UNITS[self.category]


def narayanan_flops(w) -> float:
    """FLOPs per step by Narayanan et al. 2021, Eq. 3 (counts the recompute forward).

    ``F = 96 * B * s * l * h^2 * (1 + s/(6h) + V/(16*l*h))`` with B the global batch
    (sequences), s the sequence length, l layers, h hidden size, V vocabulary.
    """
    m = w.model
    B, s, L, h, V = (w.training.global_batch_size, m.seq_length, m.num_layers,
                     m.hidden_size, m.vocab_size)
    return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def megatron_flops(w) -> float:
    """FLOPs per step by Megatron-LM's ``num_floating_point_operations`` (2024, dense):
    ``12 B s L h^2 (1 + g/a + s/h + f/h * glu + V/(2 L h))`` with ``glu`` 3/2 for gated
    MLPs (attention counted as the full square, as NeMo's TFLOP/s tables count it)."""
    m = w.model
    B, s, L, h = w.training.global_batch_size, m.seq_length, m.num_layers, m.hidden_size
    a, f = m.num_attention_heads, m.ffn
    g = m.num_query_groups or a
    glu = 1.5 if m.gated_linear_unit else 1.0
    return 12.0 * B * s * L * h * h * (1 + g / a + s / h + f / h * glu
                                       + m.vocab_size / (2 * L * h))


def _step_time(group: dict, row: dict) -> tuple[float, str]:
    kind = group.get("measured_as", "step_time_s")
    value = float(row["measured"])
    if kind == "step_time_s":
        return value, ""
    kinds = ("step_time_s", "tflops_per_gpu", "tflops_megatron", "tokens_per_gpu_s")
    if kind not in kinds:
        raise ConfigError(f"{group['group']}.measured_as", kind, f"must be one of {kinds}")
    w = load_workload(group["workload"], row.get("set", {}))
    gpus = w.parallelism.num_gpus
    if kind == "tokens_per_gpu_s":
        t = w.training.global_batch_size * w.model.seq_length / (value * gpus)
        return t, f"{value:g} tokens/s/GPU x {gpus} GPUs -> {t:.3f} s"
    if kind == "tflops_megatron":
        t = megatron_flops(w) / (value * 1e12 * gpus)
        return t, f"{value:g} TFLOP/s/GPU x {gpus} GPUs, Megatron-LM FLOPs -> {t:.3f} s"
    t = narayanan_flops(w) / (value * 1e12 * gpus)
    return t, f"{value:g} TFLOP/s/GPU x {gpus} GPUs, Narayanan Eq. 3 FLOPs -> {t:.3f} s"


def _common(group: dict) -> dict[str, Any]:
    return {"group": group["group"], "category": group["category"],
            "topology": group["topology"], "source": " ".join(str(group["source"]).split()),
            "topology_overrides": dict(group.get("topology_overrides") or {}),
            "assumptions": tuple(group.get("assumptions") or ()),
            "recipe": dict(group.get("recipe") or {})}


def _grid(group: dict, key: str, where: str | None = None) -> dict[str, list]:
    """A group's ``best_of`` grid (or a ``plausible`` one in its grid form): dotted field ->
    non-empty list of values. ``where`` names the block in errors (default: the group)."""
    where = where or str(group.get("group"))
    grid = group.get(key) or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{where}.{key}", grid, "must map dotted fields to lists of values")
    for k, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{key}.{k}", values, "must be a non-empty list of values")
    return {k: list(v) for k, v in grid.items()}


def _plausible(group: dict, row: dict) -> list[dict[str, Any]]:
    """The override sets a case's stated unknowns could have had (``plausible``, on the row
    or else on its group): a grid (dotted field -> values, every combination) or a list of
    override mappings (alternatives that go together, e.g. a published plan and its
    recipe's preset). Empty without one."""
    owner, where = (row, f"{group.get('group')}.{row.get('id')}") if "plausible" in row \
        else (group, str(group.get("group")))
    spec = owner.get("plausible") or {}
    if isinstance(spec, list):
        if not all(isinstance(alt, dict) and alt for alt in spec):
            raise ConfigError(f"{where}.plausible", spec,
                              "a list of plausible alternatives holds non-empty mappings of "
                              "dotted fields to values")
        return [dict(alt) for alt in spec]
    grid = _grid(owner, "plausible", where)
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(grid[k] for k in keys))] if keys else []


def _expand(group: dict) -> list[Case]:
    cat = group.get("category")
    if cat not in CATEGORIES:
        raise ConfigError(f"{group.get('group')}.category", cat,
                          f"must be one of {', '.join(CATEGORIES)}")
    base = _common(group)
    out: list[Case] = []
    if cat in ("dense_step_time", "moe_step_time"):
        for row in group["cases"]:
            t, how = _step_time(group, row)
            spec = {"workload": group["workload"], "overrides": dict(row.get("set") or {}),
                    "best_of": _grid(group, "best_of"),
                    "plausible": _plausible(group, row)}
            out.append(Case(id=row["id"], measured=t, spec=spec, derived=how, **base))
    elif cat == "peak_memory":
        for row in group["cases"]:
            spec = {"workload": group["workload"], "overrides": dict(row.get("set") or {}),
                    "stage": row.get("stage", group.get("stage", "last"))}
            out.append(Case(id=row["id"], measured=float(row["measured_GB"]), spec=spec,
                            topology=row.get("topology", group["topology"]),
                            **{k: v for k, v in base.items() if k != "topology"}))
    elif cat == "layer_time":
        for row in group["cases"]:
            for phase, key in (("fwd", "forward_ms"), ("bwd", "backward_ms")):
                spec = {"workload": group["workload"], "overrides": dict(row.get("set") or {}),
                        "phase": phase}
                out.append(Case(id=f"{row['id']}-{phase}", measured=row[key] * 1e-3,
                                spec=spec, **base))
    else:
        for p in group["points"]:
            spec = {"op": group["op"], "ranks": int(p.get("ranks", group.get("ranks", 0))),
                    "bytes": float(p["bytes"]), "stride": int(group.get("stride", 1)),
                    "algo": group.get("algo"), "deepep": group.get("deepep")}
            suffix = f"{spec['ranks']}r-{int(p['bytes'])}" if "ranks" in p else str(p["bytes"])
            out.append(Case(id=f"{group['group']}-{suffix}", measured=float(p["busbw_GBps"]),
                            spec=spec, **base))
    return out


def precision(case: Case) -> str:
    """A step / layer case's ``training.precision``: its row's override, else its group's
    workload, else ``bf16`` (the schema default); empty for collectives."""
    if "workload" not in case.spec:
        return ""
    over = case.spec.get("overrides") or {}
    train = case.spec["workload"].get("training") or {}
    return str(over.get("training.precision", train.get("precision", "bf16")))


def mark_holdout(cases: list[Case]) -> list[Case]:
    """Hold out every third case (3rd, 6th, ...) of each (category, topology), in file order."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for c in cases:
        key = (c.category, c.topology)
        i = seen.get(key, 0)
        seen[key] = i + 1
        out.append(replace(c, holdout=(i % 3 == 2)))
    return out


def load_cases(directory: str | Path | None = None,
               categories: list[str] | tuple[str, ...] | None = None) -> list[Case]:
    """Every case in ``directory`` (default: the repository's ``validation/``), files in
    name order, held-out flags set; optionally only the given categories."""
    root = Path(directory) if directory is not None else DEFAULT_DIR
    files = sorted(root.glob("*.yaml"))
    if not files:
        raise ConfigError("validation directory", str(root), "holds no *.yaml case files")
    if categories:
        bad = [c for c in categories if c not in CATEGORIES]
        if bad:
            raise ConfigError("--category", bad[0], f"must be one of {', '.join(CATEGORIES)}")
    cases: list[Case] = []
    for path in files:
        for group in yaml.safe_load(path.read_text()) or []:
            cases.extend(_expand(group))
    ids = [c.id for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ConfigError("case id", sorted(dup)[0], "must be unique across validation/")
    cases = mark_holdout(cases)
    return [c for c in cases if not categories or c.category in categories]
