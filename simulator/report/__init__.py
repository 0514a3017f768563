"""Figures and traces of simulated steps: see where the time went.

Every plotting function returns a :class:`matplotlib.figure.Figure` (Agg
backend, no display needed); :func:`save_figure` writes it atomically as PNG
or SVG by the file's extension.

* :func:`breakdown_figure` -- stacked step-time breakdown, one bar per
  configuration (results, or a sweep's table via :func:`frame_from_table`);
* :func:`timeline_figure` -- pipeline Gantt chart of one step;
* :func:`scaling_figure` -- tokens/s and MFU against GPUs (any column);
* :func:`memory_figure` -- memory per GPU of each pipeline stage;
* :func:`expert_load_figure` -- tokens per expert and per EP rank;
* :func:`chrome_trace` / :func:`write_trace` -- Chrome / Perfetto trace JSON;
* :mod:`simulator.studies.gallery` -- the committed gallery under ``reports/``.

>>> from simulator.report import simulate_run, timeline_figure, save_figure
>>> run = simulate_run("tiny", "dgx-h100")
>>> fig = timeline_figure(run.plan, run.engine, run.result)
"""

from .breakdown import breakdown_figure, breakdown_frame, frame_from_table
from .expert_load import expert_load_figure, expert_load_figure_for, expert_loads
from .figures import SimRun, save_figure, simulate_run
from .memory_plot import memory_figure, memory_figure_for
from .scaling import scaling_figure
from .timeline import timeline_figure
from .trace import chrome_trace, write_trace

__all__ = [
    "SimRun", "breakdown_figure", "breakdown_frame", "chrome_trace", "expert_load_figure",
    "expert_load_figure_for", "expert_loads", "frame_from_table", "memory_figure",
    "memory_figure_for", "save_figure", "scaling_figure", "simulate_run", "timeline_figure",
    "write_trace",
]
