"""The Starlette application behind ``clustersim serve``: the page, its static files, the API.

Routes (all JSON in and out, errors ``{"error": ONE_LINE}``):

* ``GET /`` the page; ``GET /static/{app.js,style.css}`` its two files (a fixed list);
* ``GET /api/shipped`` the shipped workloads and topologies, and whether capacity exists;
* ``POST /api/run`` exactly ``clustersim run --format json``; 400 with the CLI's message;
* ``POST /api/detail`` the run JSON plus memory per stage, timeline, field values;
* ``POST /api/jobs`` ``{"kind": "search"|"capacity", ...}`` -> ``{"id"}``;
  ``GET /api/jobs/{id}`` progress or result; ``DELETE /api/jobs/{id}`` cancels.

Bounds: a body over ``MAX_BODY`` bytes is refused (413) before it is read whole;
simulations run in :class:`.pool.WorkerPool` (time budget, bounded queue: 503 when full);
finished answers are kept in a bounded LRU, the only state shared between users.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from .inputs import shipped
from .manager import JobManager
from .pool import LRU, Busy, OverBudget, WorkerPool

MAX_BODY = 1_100_000  # a 1 MB YAML document, JSON-escaped, and the rest of the request
STATIC = Path(__file__).resolve().parent / "static"
FILES = {"app.js": "text/javascript", "style.css": "text/css"}
SECURITY = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                                       "style-src 'self' 'unsafe-inline'"}


class _TooBig(Exception):
    pass


class _NotJSON(Exception):
    """Not ``Content-Type: application/json``: a form or text post from another site's
    page (which a browser sends without asking this server first) is refused."""


def _error(message: str, status: int, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status, headers=SECURITY)


async def _read(request: Request) -> Any:
    """The request's JSON, read at most MAX_BODY bytes; _TooBig, _NotJSON, or ValueError
    if it does not parse (or nests too deeply for the parser)."""
    size = request.headers.get("content-length")
    if size is not None and (not size.isdigit() or int(size) > MAX_BODY):
        raise _TooBig
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise _NotJSON
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > MAX_BODY:
            raise _TooBig
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks) or b"null")
    except RecursionError:
        raise ValueError("nested too deeply to be a configuration") from None


async def _body(request: Request) -> Any:
    """The request's JSON, or the error Response that refuses it."""
    try:
        return await _read(request)
    except _TooBig:
        return _error(f"request body over {MAX_BODY} bytes; a configuration is a few kB", 413)
    except _NotJSON:
        return _error("send the body as Content-Type: application/json", 415)
    except ValueError as exc:
        return _error(f"request body is not JSON: {exc}", 400)


class _Server:
    """The handlers, and what they share: the worker pool, the jobs, the answer cache."""

    def __init__(self, workers: int, timeout_s: float, queue: int, cache_size: int,
                 job_timeout_s: float, context: str):
        self.cache = LRU(cache_size)
        self.args = (workers, timeout_s, queue, context)
        self.job_args = {"timeout_s": job_timeout_s, "context": context}
        self.timeout_s = timeout_s

    @asynccontextmanager
    async def lifespan(self, app: Starlette):
        self.pool = WorkerPool(*self.args)
        self.jobs = JobManager(**self.job_args)
        try:
            yield
        finally:
            self.pool.close()
            self.jobs.close()

    async def compute(self, request: Request, name: str) -> tuple[str, Any] | Response:
        """``(status, payload)`` of ``compute.CALLS[name]`` on the body, cached; or an
        error Response (bad body, busy, over budget)."""
        body = await _body(request)
        if isinstance(body, Response):
            return body
        key = name + json.dumps(body, sort_keys=True, default=str)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        try:
            status, payload = await self.pool.call(name, body)
        except Busy:
            return _error("the server is busy; try again in a moment", 503)
        except OverBudget:
            return _error(f"the simulation ran past its budget of {self.timeout_s:g} s and "
                          "was stopped", 503)
        if status in ("ok", "error"):
            size = len(key) + (len(payload) if isinstance(payload, str) else 200)
            self.cache.put(key, (status, payload), size)
        return status, payload

    async def run(self, request: Request) -> Response:
        out = await self.compute(request, "run")
        if isinstance(out, Response):
            return out
        status, payload = out
        if status == "ok":  # the CLI's JSON text as it is
            return Response(payload, media_type="application/json", headers=SECURITY)
        return _error(payload["error"], 400 if status == "error" else 500)

    async def detail(self, request: Request) -> Response:
        out = await self.compute(request, "detail")
        if isinstance(out, Response):
            return out
        status, payload = out
        if status == "ok":
            return Response(payload, media_type="application/json", headers=SECURITY)
        return JSONResponse(payload, status_code=400 if status == "error" else 500,
                            headers=SECURITY)

    async def start_job(self, request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, Response):
            return body
        kind = body.get("kind") if isinstance(body, dict) else None
        if kind not in ("search", "capacity"):
            return _error(f"kind = {kind!r}: must be 'search' or 'capacity'", 400)
        job_id = self.jobs.start(kind, body)
        if job_id is None:
            return _error("as many jobs as the server runs at once are running; try later",
                          503)
        return JSONResponse({"id": job_id}, headers=SECURITY)

    async def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        found = (self.jobs.cancel(job_id) if request.method == "DELETE"
                 else self.jobs.get(job_id))
        if found is None:
            return _error("no such job (finished jobs are kept for 10 minutes)", 404)
        return JSONResponse(found.view(), headers=SECURITY)

    async def page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html", headers=SECURITY)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in FILES:
            return _error("not found", 404)
        return FileResponse(STATIC / name, media_type=FILES[name], headers=SECURITY)

    async def names(self, request: Request) -> Response:
        return JSONResponse({**shipped(), "capacity": True}, headers=SECURITY)


def create_app(workers: int = 2, timeout_s: float = 20.0, queue: int = 32,
               cache_size: int = 256, job_timeout_s: float = 300.0,
               context: str = "spawn", hosts: list[str] | None = None) -> Starlette:
    """The application; ``context`` is the multiprocessing start method of its workers,
    ``hosts`` the Host headers it answers (None: any; see :func:`allowed_hosts`)."""
    srv = _Server(workers, timeout_s, queue, cache_size, job_timeout_s, context)
    routes = [Route("/", srv.page), Route("/static/{name}", srv.static),
              Route("/api/shipped", srv.names), Route("/api/run", srv.run, methods=["POST"]),
              Route("/api/detail", srv.detail, methods=["POST"]),
              Route("/api/jobs", srv.start_job, methods=["POST"]),
              Route("/api/jobs/{job_id}", srv.job, methods=["GET", "DELETE"])]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)] if hosts else []
    return Starlette(routes=routes, lifespan=srv.lifespan, middleware=middleware)


def allowed_hosts(bind: str) -> list[str] | None:
    """Bound to loopback, answer only requests addressed to loopback names: another site's
    page cannot reach the server through a DNS name it re-points at 127.0.0.1."""
    loopback = ["127.0.0.1", "localhost", "::1", "[::1]"]
    return loopback if bind in loopback else None
