"""Published comparisons between pipeline schedules (validation/schedules/schedule_ratios.yaml).

Each case states its source, what is compared and its tolerance; a case with a
``known_deviation`` must still be reported and must still deviate (so the note
is removed when the model is fixed).
"""

from __future__ import annotations

import pytest

from simulator.studies.schedules import evaluate, load_cases, passes

SOURCES, CASES = load_cases()


def test_every_case_names_a_source_and_what_it_compares():
    for case in CASES:
        assert case["source"] in SOURCES and case["what"] and case["check"] in ("equal",
                                                                                "at_most")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_published_schedule_ratio(case):
    ours = evaluate(case)
    if case.get("known_deviation"):
        assert not passes(case, ours), f"{case['id']} now matches: drop its known_deviation"
        assert ours < 0.1  # ZB-V: under a tenth of the work, against the published zero
    else:
        assert passes(case, ours), f"{case['id']}: ours {ours:.4g} vs {case['published']}"
