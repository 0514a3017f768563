"""What the engine writes down: interval records, and the recorders that keep or drop them.

A :class:`Record` is one interval on one stream of one simulated rank. A
pipeline send carries its destination ``(dst_stage, dst_chunk)``, decided once
by the schedule's :class:`~simulator.schedules.Route`; the trace and the
figures read it rather than re-deriving the send rule.

The engine takes a recorder: :class:`ListRecorder` keeps every record (trace,
timeline, tests), :class:`NullRecorder` only counts them (the plain ``run`` /
``simulate`` path, where nobody reads them), :class:`SpanRecorder` keeps only each
stage's compute and send intervals (the long-pipeline fold's periodicity check).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class Record(NamedTuple):
    """One interval on one stream of one simulated rank (seconds from step start)."""

    stage: int
    stream: str  # "compute" | "pp" | "dp" | "optimizer"
    name: str  # "F" | "B" | "W" | "send_F" | "send_B" | "grad_sync" | "optimizer" | ...
    start: float
    end: float
    mb: int
    chunk: int
    nbytes: float = 0.0  # bytes moved (transfers and collectives)
    dst_stage: int = -1  # sends: the stage that consumes the transfer
    dst_chunk: int = -1  # sends: the chunk on dst_stage that consumes it
    fused: bool = False  # compute: half of an overlapped F&B pair (DualPipe)


class Recorder(Protocol):
    count: int

    def add(self, rec: Record) -> None: ...

    @property
    def records(self) -> list[Record]: ...


class ListRecorder:
    """Keeps every record, in the order the engine emits them."""

    def __init__(self) -> None:
        self.count = 0
        self._records: list[Record] = []

    def add(self, rec: Record) -> None:
        self.count += 1
        self._records.append(rec)

    @property
    def records(self) -> list[Record]:
        return self._records


class NullRecorder:
    """Counts records (the result reports the event count) and keeps none."""

    def __init__(self) -> None:
        self.count = 0

    def add(self, rec: Record) -> None:
        self.count += 1

    @property
    def records(self) -> list[Record]:
        return []


class SpanRecorder:
    """Keeps each stage's compute and send intervals ``(start, end)`` in its own order,
    nothing else (the direct replay fills them without building records)."""

    def __init__(self, stages: int) -> None:
        self.count = 0
        self.compute: list[list[tuple[float, float]]] = [[] for _ in range(stages)]
        self.sends: list[list[tuple[float, float]]] = [[] for _ in range(stages)]

    def add(self, rec: Record) -> None:
        self.count += 1
        if rec.stream == "compute":
            self.compute[rec.stage].append((rec.start, rec.end))
        elif rec.stream == "pp":
            self.sends[rec.stage].append((rec.start, rec.end))

    @property
    def records(self) -> list[Record]:
        return []
