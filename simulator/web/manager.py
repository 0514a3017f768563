"""The server's side of jobs (:mod:`.jobs`): start, poll, cancel; bounded in number and time.

Each job is a process with a pipe back; the event loop reads the pipe when it is readable
(``loop.add_reader``), keeping only the latest progress and the final answer. A job past
``timeout_s`` is killed and ends in an error; a finished one is forgotten ``keep_s``
seconds later, and at most ``max_jobs`` are known at once.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import secrets
import time
from typing import Any

from .jobs import job_main


class Job:
    def __init__(self, kind: str, proc: Any, conn: Any):
        self.kind, self.proc, self.conn = kind, proc, conn
        self.state = "running"
        self.progress: dict[str, Any] = {"label": "preparing", "done": 0, "total": 0}
        self.answer: Any = None
        self.started = time.monotonic()
        self.ended: float | None = None

    def view(self) -> dict[str, Any]:
        out = {"kind": self.kind, "state": self.state, "progress": self.progress,
               "elapsed_s": (self.ended or time.monotonic()) - self.started}
        if self.state == "done":
            out["result"] = self.answer
        elif self.state in ("error", "cancelled"):
            out.update(self.answer or {})
        return out


class JobManager:
    def __init__(self, max_running: int = 2, timeout_s: float = 300.0, keep_s: float = 600.0,
                 max_jobs: int = 64, context: str = "spawn"):
        self.ctx = multiprocessing.get_context(context)
        self.max_running, self.timeout_s = max_running, timeout_s
        self.keep_s, self.max_jobs = keep_s, max_jobs
        self.jobs: dict[str, Job] = {}

    def running(self) -> int:
        return sum(j.state == "running" for j in self.jobs.values())

    def start(self, kind: str, body: Any) -> str | None:
        """A new job's id, or None when ``max_running`` jobs already run."""
        self._expire()
        if self.running() >= self.max_running or len(self.jobs) >= self.max_jobs:
            return None
        conn, child = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=job_main, args=(kind, body, child), daemon=True)
        proc.start()
        child.close()
        job_id = secrets.token_urlsafe(16)
        job = self.jobs[job_id] = Job(kind, proc, conn)
        loop = asyncio.get_running_loop()
        loop.add_reader(conn.fileno(), self._read, job)
        loop.call_later(self.timeout_s, self._over_time, job)
        return job_id

    def _read(self, job: Job) -> None:
        try:
            while job.conn.poll():
                what, payload = job.conn.recv()
                if what == "progress":
                    job.progress = payload
                else:
                    self._end(job, "done" if what == "done" else "error", payload)
                    return
        except (EOFError, OSError):  # the process died without answering
            self._end(job, "error", {"error": "the job's process ended without an answer"})

    def _end(self, job: Job, state: str, answer: Any) -> None:
        if job.state != "running":
            return
        job.state, job.answer, job.ended = state, answer, time.monotonic()
        asyncio.get_running_loop().remove_reader(job.conn.fileno())
        job.conn.close()
        if job.proc.is_alive():
            job.proc.kill()
        job.proc.join(5)

    def _over_time(self, job: Job) -> None:
        self._end(job, "error", {"error": f"the job ran past its budget of "
                                          f"{self.timeout_s:g} s and was stopped"})

    def get(self, job_id: str) -> Job | None:
        self._expire()
        return self.jobs.get(job_id)

    def cancel(self, job_id: str) -> Job | None:
        job = self.jobs.get(job_id)
        if job is not None:
            self._end(job, "cancelled", {"error": "cancelled"})
        return job

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, j in self.jobs.items()
                    if j.ended is not None and now - j.ended > self.keep_s]:
            del self.jobs[key]

    def close(self) -> None:
        for job in list(self.jobs.values()):
            if job.state == "running":
                job.proc.kill()
