"""The server torture's checks of topics (torture.server_topics.check_topics) find each kind of violation: a topic
short of partitions, an acknowledged create, extension or delete not durable, a record left, a topic never asked
for, a Metadata poll that saw a topic not whole."""
from __future__ import annotations

from pathlib import Path

import pytest

from torture.server_topics import RECORD_DIR, check_topics, nth_for, parse_admin

pytestmark = pytest.mark.unit


def store(tmp_path: Path, folders: dict[str, list[str]]) -> list[Path]:
    dirs = [tmp_path / "logs-0", tmp_path / "logs-1"]
    for i, d in enumerate(dirs):
        d.mkdir()
        for name in folders.get(str(i), []):
            (d / name).mkdir()
    return dirs


LINES = ["TRY create m1-0 3", "ACK create m1-0 3", "TRY extend m1-0 5", "ACK extend m1-0 5",
         "TRY create m1-1 2", "ACK create m1-1 2", "TRY delete m1-1 0", "ACK delete m1-1 0",
         "TRY create m1-2 4", "END 4 100"]


def test_a_whole_store_passes(tmp_path):
    dirs = store(tmp_path, {"0": ["m1-0-0", "m1-0-2", "m1-0-4", "m1-1-0.abc-delete"], "1": ["m1-0-1", "m1-0-3"]})
    assert check_topics(dirs, "m1-", parse_admin(LINES)) == []


def test_a_create_in_flight_may_be_whole_or_absent_never_short(tmp_path):
    (tmp_path / "a").mkdir()
    whole = store(tmp_path / "a", {"0": [f"m1-0-{p}" for p in range(5)] + [f"m1-2-{p}" for p in range(4)]})
    assert check_topics(whole, "m1-", parse_admin(LINES)) == []
    (tmp_path / "b").mkdir()
    short = store(tmp_path / "b", {"0": [f"m1-0-{p}" for p in range(5)] + ["m1-2-0", "m1-2-1"]})
    assert check_topics(short, "m1-", parse_admin(LINES)) == [
        "topic m1-2 is not whole: partitions [0, 1], asked for counts [4]"]


def test_every_violation_is_named(tmp_path):
    dirs = store(tmp_path, {"0": ["m1-0-0", "m1-0-1", "m1-0-2", "m1-1-0", "m1-9-0"]})
    (dirs[0] / RECORD_DIR).mkdir()
    (dirs[0] / RECORD_DIR / "m1-2").write_text("{}")
    found = check_topics(dirs, "m1-", parse_admin(LINES + ["BAD m1-0 0,1", "GIVEUP delete m1-3 0 timeout"]))
    assert found == [
        "topic-change records left after a clean stop: ['m1-2']",
        "Metadata showed 1 topic(s) not whole, e.g. ['BAD m1-0 0,1']",
        "1 topic operation(s) without a definitive answer: ['GIVEUP delete m1-3 0 timeout']",
        "topic m1-1 is not whole: partitions [0], asked for counts [2]",
        "topic m1-9 in the store, never asked for (1 partitions)",
        "topic m1-0: extend to 5 partitions acknowledged, the store has 3",
        "topic m1-1: its delete was acknowledged, yet it has 1 partitions",
    ]


def test_the_first_start_skips_the_hits_of_the_producers_topic():
    assert nth_for("topic.create.partition", True, 3, 1) == 4
    assert nth_for("topic.create.intent", True, 3, 2) == 3
    assert nth_for("topic.delete.intent", True, 3, 2) == 2
    assert nth_for("topic.create.partition", False, 3, 1) == 1
