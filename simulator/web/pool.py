"""Bounded compute for the web server: worker processes with a time budget, and an LRU cache.

The server's event loop never simulates. :class:`WorkerPool` keeps ``workers`` processes;
a request waits for an idle one (at most ``queue`` requests wait; one more is refused with
:class:`Busy` at once), sends it the call, and waits at most ``timeout_s`` for the answer.
A worker past its budget is killed and replaced, so a runaway configuration costs one
worker for ``timeout_s`` and never the server. The answer arrives on the worker's pipe,
watched by the event loop (``loop.add_reader``): no thread per waiting request.

:class:`LRU` is the one state shared between users: finished answers by request, bounded
in entries. Everything here is standard library (:mod:`multiprocessing`, :mod:`asyncio`).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
from collections import OrderedDict
from typing import Any


class Busy(Exception):
    """Every worker is busy and the queue is full: try again shortly (HTTP 503)."""


class OverBudget(Exception):
    """The call ran past its time budget; its worker was replaced (HTTP 503)."""


def worker_main(conn: Any) -> None:
    """A worker's loop: ``(function name, request body)`` in, ``(status, payload)`` out.

    ``status`` is ``"ok"`` (the answer as JSON text), ``"error"`` (a ConfigError's one
    line and field) or ``"bug"``."""
    from ..errors import ConfigError
    from . import compute

    while True:
        try:
            name, body = conn.recv()
        except (EOFError, OSError):
            return
        try:
            out = compute.CALLS[name](body)
            reply = ("ok", out if isinstance(out, str) else json.dumps(out))
        except ConfigError as exc:
            reply = ("error", {"error": exc.message(), "field": exc.field})
        except Exception as exc:  # a bug: reported, the worker lives on
            reply = ("bug", {"error": f"internal error: {type(exc).__name__}: {exc}"})
        conn.send(reply)


class _Worker:
    def __init__(self, ctx: Any):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()


class WorkerPool:
    """``workers`` processes; at most ``queue`` calls wait; each call at most ``timeout_s``."""

    def __init__(self, workers: int = 2, timeout_s: float = 20.0, queue: int = 32,
                 context: str = "spawn"):
        self.ctx = multiprocessing.get_context(context)
        self.timeout_s, self.queue = timeout_s, queue
        self._all = [_Worker(self.ctx) for _ in range(workers)]
        self._idle: asyncio.Queue[_Worker] | None = None
        self._waiting = 0

    def _ready(self) -> asyncio.Queue[_Worker]:
        if self._idle is None:  # made inside the server's event loop
            self._idle = asyncio.Queue()
            for w in self._all:
                self._idle.put_nowait(w)
        return self._idle

    async def call(self, name: str, body: Any) -> tuple[str, Any]:
        """Run ``compute.CALLS[name](body)`` in a worker; raises Busy or OverBudget."""
        idle = self._ready()
        if idle.empty() and self._waiting >= self.queue:
            raise Busy
        self._waiting += 1
        try:
            worker = await idle.get()
        finally:
            self._waiting -= 1
        try:
            reply = await asyncio.wait_for(self._ask(worker, name, body), self.timeout_s)
        except TimeoutError:
            worker = self._replace(worker)
            raise OverBudget from None
        except BaseException:  # the client went away mid-call: the answer is unread
            worker = self._replace(worker)
            raise
        finally:
            idle.put_nowait(worker)
        return reply

    async def _ask(self, worker: _Worker, name: str, body: Any) -> tuple[str, Any]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        fd = worker.conn.fileno()
        loop.add_reader(fd, lambda: done.done() or done.set_result(None))
        try:
            worker.conn.send((name, body))
            await done
            return worker.conn.recv()
        finally:
            loop.remove_reader(fd)

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        fresh = _Worker(self.ctx)
        self._all[self._all.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        for w in self._all:
            w.kill()


class LRU:
    """The last answers by key, at most ``size`` of them and ``max_bytes`` of text; the only
    state the server shares between users."""

    def __init__(self, size: int = 256, max_bytes: int = 64_000_000):
        self.size, self.max_bytes, self.bytes = size, max_bytes, 0
        self._d: OrderedDict[str, tuple[Any, int]] = OrderedDict()

    def get(self, key: str) -> Any:
        if key in self._d:
            self._d.move_to_end(key)
            return self._d[key][0]
        return None

    def put(self, key: str, value: Any, nbytes: int = 0) -> None:
        if key in self._d:
            self.bytes -= self._d.pop(key)[1]
        if nbytes > self.max_bytes:
            return
        self._d[key] = (value, nbytes)
        self.bytes += nbytes
        while len(self._d) > self.size or self.bytes > self.max_bytes:
            self.bytes -= self._d.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._d)
