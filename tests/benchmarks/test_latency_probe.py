"""benchmarks/latency_probe.py's split of each record's time (no broker: a traced broker's Produce requests and a
client's timeline made up here). Nothing here judges a time."""
from __future__ import annotations

import pytest

from benchmarks.latency_probe import decompose

pytestmark = pytest.mark.unit


def test_each_record_is_charged_to_the_request_that_holds_it():
    # two requests to "t" (offsets 1-3 and 4-5; offset 0 is the warm-up record) and one to another topic
    produces = [(10.0, 10.002, [("t", 1)]), (10.010, 10.011, [("t", 4)]), (10.0, 10.5, [("other", 1)])]
    timeline = [(1, 9.995, 10.003), (2, 9.996, 10.003), (3, 9.999, 10.004), (4, 10.004, 10.012), (5, 10.005, 10.020)]
    lines = decompose(produces, "t", timeline)
    assert lines[0].startswith("total") and "p50     8.00" in lines[0]
    # record 5: produced at 10.005, its request read at 10.010 (5 ms), answered at 10.011 (1 ms), called at 10.020
    assert lines[4] == "slowest 1%: mean to the broker 5.00, in the broker 1.00, back 9.00 ms (total 15.00)"
    assert decompose(produces, "missing", timeline) == ["no traced request appended to missing"]
