"""Fuzz every surface of :data:`fuzz_surfaces.SURFACES`: a one-line ConfigError or a possible
result, never a traceback (issue 33).

The default run is a fixed, derandomized slice (each surface's ``examples``, seconds).
The long run::

    CLUSTERSIM_FUZZ_EXAMPLES=3400 CLUSTERSIM_FUZZ_REPORT=fuzz.json \\
        python -m pytest tests/test_fuzz_surfaces.py -p no:cacheprovider

draws that many inputs per surface (``CLUSTERSIM_FUZZ_SURFACES=hf_import,sensitivity``
picks some), stops any input after ``CPU_LIMIT_S`` seconds of CPU and counts it as a
failure, and writes per-surface counts (results, ConfigErrors, slowest CPU seconds) to
``CLUSTERSIM_FUZZ_REPORT``. No timing is asserted in the default run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest
from fuzz_surfaces import CPU_LIMIT_S, SURFACES
from hypothesis import HealthCheck, given, settings

from simulator import ConfigError

BIG = os.environ.get("CLUSTERSIM_FUZZ_EXAMPLES")
CHOSEN = [s for s in os.environ.get("CLUSTERSIM_FUZZ_SURFACES", "").split(",") if s]
FUZZ = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=list(HealthCheck))
TALLY: dict[str, Counter] = {name: Counter() for name in SURFACES}
SLOWEST: dict[str, float] = dict.fromkeys(SURFACES, 0.0)


class _OverBudget(Exception):
    """An input ran past CPU_LIMIT_S seconds of CPU (long run only)."""


def _alarm(*_):
    raise _OverBudget


def _run(name: str, value):
    """(outcome, result): the surface called on ``value``, under the CPU budget when long."""
    surface = SURFACES[name]
    limit = BIG and hasattr(signal, "setitimer")
    if limit:
        signal.signal(signal.SIGPROF, _alarm)
        signal.setitimer(signal.ITIMER_PROF, CPU_LIMIT_S)
    start = time.process_time()
    try:
        return "result", surface.call(value)
    except ConfigError as exc:
        return "config_error", exc
    finally:
        if limit:
            signal.setitimer(signal.ITIMER_PROF, 0)
        SLOWEST[name] = max(SLOWEST[name], time.process_time() - start)


@pytest.mark.parametrize("name", [n for n in SURFACES if not CHOSEN or n in CHOSEN])
def test_surface_gives_a_one_line_error_or_a_possible_result(name):
    surface = SURFACES[name]

    @settings(max_examples=int(BIG) if BIG else surface.examples, **FUZZ)
    @given(surface.inputs)
    def check(value):
        try:
            outcome, out = _run(name, value)
        except _OverBudget:
            TALLY[name]["over_cpu_limit"] += 1
            raise AssertionError(f"{name}: over {CPU_LIMIT_S} s CPU on {value!r}") from None
        TALLY[name][outcome] += 1
        if outcome == "config_error":
            msg = out.message()
            assert "\n" not in msg and str(out.field).strip(), msg
            assert not msg.startswith("(a field with no name)"), msg
            return
        problems = surface.check(value, out)
        if problems:
            TALLY[name]["impossible"] += 1
        assert not problems, f"{name}: impossible output on {value!r}: {problems}"

    check()
    # both sides exercised: the generators reach results and errors
    assert TALLY[name]["result"] > 0 and TALLY[name]["config_error"] > 0, TALLY[name]


def teardown_module(module):
    path = os.environ.get("CLUSTERSIM_FUZZ_REPORT")
    if path:
        doc = {n: {**TALLY[n], "slowest_cpu_s": round(SLOWEST[n], 3)} for n in TALLY}
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=2, sort_keys=True)
