"""What-if sweeps and plan search, on local processes or a Dask cluster.

A *sweep* varies a base configuration along axes and simulates every point;
the answer is a pandas DataFrame with one row per configuration holding every
input (dotted keys such as ``parallelism.tensor``, ``topology.gpu.hbm_GB``),
every output (the keys of ``Result.to_series()``), a ``status`` (``ok`` /
``invalid`` / ``error``) and, for rows that are not ok, a ``reason``.

>>> from simulator.sweep import sweep
>>> df = sweep("tiny", "dgx-h100",
...            axes={"parallelism.tensor": [1, 2, 3], "num_gpus": [8]},
...            executor="serial")
>>> df[["parallelism.tensor", "parallelism.data", "status"]].values.tolist()
[[1, 4, 'ok'], [2, 2, 'ok'], [3, 1, 'invalid']]
>>> print(df.reason[2])
num_gpus = 8: must be a multiple of tensor*pipeline*context (3*2*1 = 6)
>>> bool(df.tokens_per_s[1] > 0)
True

Axes form a cartesian product in the order given; ``zip_axes`` groups keys
that vary together; ``num_gpus`` sets ``parallelism.data`` to
``gpus / (tensor * pipeline * context)`` and moves nothing else; ``topology``
and ``workload`` can be axes too (see :mod:`.spec` for the YAML form that
``clustersim sweep`` reads). Rows come back in configuration order, identical
to the bit whichever executor ran them. With ``store=DIR`` every outcome is
appended to a SQLite store as it finishes; a sweep killed at any point and
started again recomputes nothing already stored (:mod:`.store`).

A *plan search* (:func:`search_plans`, ``clustersim search``) enumerates every
parallel plan of one model on N GPUs, drops the invalid and those that do not
fit, bounds the rest and simulates only those that can still reach the top
(:mod:`.search`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from ..api import merge_overrides
from ..reliability.sweep_metrics import check_options
from .executors import Executor, make_executor
from .progress import Progress
from .resolve import Documents
from .runner import SweepCounts, run_table, write_csv, write_parquet
from .search import SearchResult, row_to_overrides, search_plans
from .spec import SweepSpec, expand, load_sweep, make_spec
from .store import ResultStore
from .table import Table

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Executor", "ResultStore", "SearchResult", "SweepCounts", "SweepSpec", "Table", "expand",
    "load_sweep", "make_executor", "make_spec", "row_to_overrides", "run_sweep", "search",
    "search_plans", "sweep", "sweep_table",
    "write_csv", "write_parquet",
]


def run_sweep(spec: SweepSpec, executor: str | Executor = "local", scheduler: Any = None,
              workers: int | None = None, store: str | Path | None = None,
              progress: bool | None = None) -> pd.DataFrame:
    """Run a checked sweep spec; see :func:`sweep` for the arguments."""
    return sweep_table(spec, executor, scheduler, workers, store, progress).frame()


def sweep_table(spec: SweepSpec, executor: str | Executor = "local", scheduler: Any = None,
                workers: int | None = None, store: str | Path | None = None,
                progress: bool | None = None) -> Table:
    """:func:`run_sweep`'s rows before they become a DataFrame (:mod:`.table`): what the
    CLI writes as CSV without loading pandas."""
    points = expand(spec)
    ex = executor if isinstance(executor, Executor) else make_executor(executor, scheduler,
                                                                        workers)
    st = ResultStore(store) if store is not None else None
    try:
        with Progress(len(points), "sweep", enabled=progress) as bar:
            return run_table(points, ex, st, bar, Documents(spec.base_dir),
                             check_options(spec.time_to_train))
    finally:
        if st is not None:
            st.close()
        if ex is not executor:
            ex.close()


def sweep(workload: Any = None, topology: Any = None, axes: dict[str, list] | None = None,
          zip_axes: dict[str, list] | list[dict[str, list]] | None = None, *,
          overrides: Mapping[str, Any] | None = None,
          topology_overrides: Mapping[str, Any] | None = None, seed: int | None = None,
          executor: str | Executor = "local", scheduler: Any = None,
          workers: int | None = None, store: str | Path | None = None,
          progress: bool | None = None, time_to_train: dict[str, Any] | None = None
          ) -> pd.DataFrame:
    """Simulate every configuration of a grid; one DataFrame row each.

    Args:
        workload, topology: the base (path, shipped name, dict or config object);
            either may be omitted when it is an axis.
        axes: ``{dotted key: [values]}``, combined as a cartesian product.
        zip_axes: ``{key: [values]}`` varied together (equal lengths), or a list
            of such groups.
        overrides, topology_overrides: base dotted-path overrides (as for
            :func:`simulator.simulate`).
        seed: root seed of every configuration (``training.seed``).
        executor: ``"local"`` (processes, default all cores; ``workers`` to
            choose), ``"dask"`` (``scheduler`` = address, Client or LocalCluster)
            or ``"serial"``; or an :class:`Executor` you manage.
        store: directory of a result store to append to and resume from.
        progress: draw a progress bar on stderr (default: when it is a terminal).
        time_to_train: ``{"tokens": ..., "price_per_gpu_hour": ...}`` adds the
            ``time_to_train.*`` columns (:mod:`simulator.reliability.sweep_metrics`).

    Counts of what ran (from store, simulated, invalid) are in ``df.attrs["counts"]``.
    """
    spec = make_spec(workload, topology, axes, zip_axes, merge_overrides(overrides, seed),
                     merge_overrides(topology_overrides), time_to_train=time_to_train)
    return run_sweep(spec, executor, scheduler, workers, store, progress)


@overload
def search(workload: Any, topology: Any, gpus: int, top: int = 10, **kwargs: Any
           ) -> SearchResult: ...


@overload
def search(workload: Any, topology: Any, gpus: Sequence[int], top: int = 10, **kwargs: Any
           ) -> list[SearchResult]: ...


def search(workload: Any, topology: Any, gpus: int | Sequence[int], top: int = 10, *,
           overrides: Mapping[str, Any] | None = None,
           topology_overrides: Mapping[str, Any] | None = None, seed: int | None = None,
           micro_batch_sizes: tuple[int, ...] = (1, 2, 4, 8), max_context: int = 16,
           max_simulations: int = 2000, schedules: str | Sequence[str] | None = None,
           sharding: str | Sequence[str] | None = None,
           executor: str | Executor = "local",
           scheduler: Any = None, workers: int | None = None,
           store: str | Path | None = None,
           progress: bool | None = None) -> SearchResult | list[SearchResult]:
    """The fastest plans of ``workload`` on ``gpus`` GPUs (:func:`search_plans`), with the
    executor and store set up (and closed) for you.

    Args:
        gpus: a GPU count, or several (then one :class:`SearchResult` per count, in
            order, sharing one executor and store).
        overrides, topology_overrides, seed: as for :func:`simulator.simulate`.
        micro_batch_sizes, max_context, max_simulations: the search space and its cap.
        schedules: pipeline schedules to try: names from
            :data:`simulator.schedules.SCHEDULES` (a list or a comma-separated string)
            or ``"all"``; default Megatron's 1F1B, interleaved when VP > 1.
        sharding: data-parallel layouts to try: ``"ddp"`` (Megatron DDP) and Megatron-FSDP
            strategies (``"optim_grads"``, ``"optim_grads_params"``, ...), a list or a
            comma-separated string, or ``"all"``; default: the workload's own.
        executor, scheduler, workers, store, progress: as for :func:`sweep`.

    ``result.overrides_for(rank)`` gives the overrides that reproduce a row.
    """
    counts = [gpus] if isinstance(gpus, int) else list(gpus)
    ex = executor if isinstance(executor, Executor) else make_executor(executor, scheduler,
                                                                        workers)
    st = ResultStore(store) if store is not None else None
    try:
        out = [search_plans(workload, topology, n, top, overrides=merge_overrides(overrides, seed),
                            topology_overrides=merge_overrides(topology_overrides),
                            micro_batch_sizes=micro_batch_sizes, max_context=max_context,
                            max_simulations=max_simulations, schedules=schedules,
                            sharding=sharding, executor=ex, store=st,
                            progress=progress) for n in counts]
    finally:
        if st is not None:
            st.close()
        if ex is not executor:
            ex.close()
    return out[0] if isinstance(gpus, int) else out
