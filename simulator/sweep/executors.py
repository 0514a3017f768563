"""Where sweep work runs: this process, local processes, or a Dask cluster.

An executor has one method that matters, ``map(fn, items)``, which yields
``(index, fn(item))`` pairs in *completion* order; callers put results back by
index, which is why every executor produces the same table. ``fn`` must be a
module-level function: it travels by reference, never by value.

* ``serial``: in this process, one item after another (``local`` with one
  worker is this too).
* ``local`` (default): :class:`concurrent.futures.ProcessPoolExecutor` with
  one process per core. Where the parent runs a single thread (the CLI, most
  scripts) children are forked: they start in milliseconds with the simulator
  already imported. Where other threads run (a Dask client, a notebook
  kernel), forking could copy a lock some thread holds, so children come from
  a *forkserver* instead; as with any such start method, a script must then
  guard its entry point with ``if __name__ == "__main__":``.
* ``dask``: ``distributed.Client(address)`` on an existing cluster; a
  ``Client`` or ``LocalCluster`` object is accepted too, and then left open.

A local worker exits by itself when the process that started it dies (a
SIGKILL'd parent runs no clean-up): a daemon thread started in each worker
(:func:`watch_parent`) polls its parent's PID and calls ``os._exit`` once the
worker has been re-parented. With a forkserver the worker's parent is the
server, which exits when its creator does, so the same test holds.

Work travels in chunks of a few items (:func:`chunk_size`), small enough that
results stream back to the store and the progress bar as they finish, large
enough that per-task overhead (about a millisecond) stays below the cost of a
simulation (tens of milliseconds).

Extension point: another backend needs ``workers``, ``map`` and ``close``.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..optional import require
from .tasks import run_chunk

KINDS = ("local", "dask", "serial")
PRELOAD = ["simulator.sweep.tasks", "simulator.sweep.search_tasks"]


WATCH_PERIOD_S = 0.5  # how often an orphaned worker notices; costs nothing measurable


def _alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs (an unreaped zombie does not, where ``/proc``
    tells)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an unreaped zombie has exited
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] not in (["Z"], ["X"])


def watch_parent(creator: int | None = None, period: float = WATCH_PERIOD_S) -> None:
    """Worker initializer: exit this process once the process that made the pool is gone.

    ``creator`` is that process's PID, taken in the creator when the pool is made (not read
    here, where the creator may already have died: a worker that starts after a SIGKILL
    would otherwise watch its new parent, the reaper, and run forever). A forked worker's
    parent is the creator itself; a forkserver's worker's parent is the server, which exits
    when the creator does. Linux's ``PR_SET_PDEATHSIG`` would signal the worker, but fires
    when the parent *thread* exits and is not portable; polling is both.
    """
    parent = os.getppid()
    forked = creator is None or parent == creator

    def gone() -> bool:
        if creator is None:
            return os.getppid() != parent
        if forked:
            return os.getppid() != creator
        return os.getppid() != parent or not _alive(creator)

    def loop() -> None:
        while not gone():
            time.sleep(period)
        os._exit(1)

    if creator is not None and not forked and not _alive(creator):
        os._exit(1)
    threading.Thread(target=loop, name="parent-watchdog", daemon=True).start()


def chunk_size(n: int, workers: int) -> int:
    """About eight chunks per worker, at most eight items each."""
    return max(1, min(8, n // (8 * max(1, workers))))


def _chunks(items: list[Any], size: int) -> list[list[tuple[int, Any]]]:
    pairs = list(enumerate(items))
    return [pairs[i:i + size] for i in range(0, len(pairs), size)]


def _context() -> multiprocessing.context.BaseContext:
    """Fork when this process has one thread, else a forkserver (see module docstring)."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


class Executor:
    """Base class: runs in this process."""

    workers = 1

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[tuple[int, Any]]:
        for i, item in enumerate(items):
            yield i, fn(item)

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """Local processes, one per core by default (see module docstring)."""

    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=_context(),
                                             initializer=watch_parent,
                                             initargs=(os.getpid(),))
        return self._pool

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[tuple[int, Any]]:
        if not items:
            return
        pool = self._get_pool()
        futures = [pool.submit(run_chunk, fn, c)
                   for c in _chunks(items, chunk_size(len(items), self.workers))]
        try:
            for fut in as_completed(futures):
                yield from fut.result()
        finally:
            for fut in futures:
                fut.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class DaskExecutor(Executor):
    """Chunks submitted to a Dask distributed cluster."""

    def __init__(self, scheduler: Any):
        Client = require("distributed", "--executor").Client  # an extra: clustersim[dask]

        if scheduler is None:
            raise ConfigError("--scheduler", None, "the dask executor needs a scheduler "
                              "address, e.g. tcp://10.0.0.5:8786")
        self._own = not isinstance(scheduler, Client)
        if isinstance(scheduler, Client):
            self.client = scheduler
        else:
            address = getattr(scheduler, "scheduler_address", scheduler)
            try:
                self.client = Client(address, timeout="20s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise ConfigError("--scheduler", str(address),
                                  f"no Dask scheduler answered ({exc})") from None
        self.workers = max(1, sum(self.client.nthreads().values()))

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[tuple[int, Any]]:
        from distributed import as_completed as dask_completed

        if not items:
            return
        futures = [self.client.submit(run_chunk, fn, c, pure=False)
                   for c in _chunks(items, chunk_size(len(items), self.workers))]
        try:
            for fut in dask_completed(futures):
                yield from fut.result()
        finally:
            for fut in futures:
                fut.cancel()

    def close(self) -> None:
        if self._own:
            self.client.close()


def make_executor(kind: str = "local", scheduler: Any = None,
                  workers: int | None = None) -> Executor:
    """``local`` (``workers`` processes, default all cores), ``dask`` or ``serial``."""
    if kind == "dask":
        return DaskExecutor(scheduler)
    if kind == "serial" or (kind == "local" and workers == 1):
        return Executor()
    if kind == "local":
        if workers is not None and workers < 1:
            raise ConfigError("--workers", workers, "must be at least 1")
        return LocalExecutor(workers)
    raise ConfigError("--executor", kind, f"must be one of {', '.join(KINDS)}")
