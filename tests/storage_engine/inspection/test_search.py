"""Searching a topic (:mod:`storage_engine.inspection.search`) against the engine's own reads: a key goes to the
partition Kafka's default partitioner picks (checked against kafka-python's partitioner), falls back to every
partition when that one holds none (the partitioner against real producers: tests/airflow/test_search.py), the value/JSON/header filters keep exactly the records a plain Python filter
of the engine's records keeps, the view (masking) comes before the filters, and long scans come in steps."""
from __future__ import annotations

import json
import random

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import InvalidRequestError
from storage_engine.inspection import search as s
from storage_engine.log.manager import LogManager
from storage_engine.record.partitioner import default_partition, murmur2
from storage_engine.record.records import Record, SimpleRecord
from tests.storage_engine.helpers import get_log

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
PARTITIONS = 3
STRAY_KEY = b"moved-key"          # written to a partition its murmur2 does not pick


@pytest.fixture
def config(tmp_path):
    return config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "a"), str(tmp_path / "b")],
                                           "log.segment.bytes": 4096}})


def fill(config, records: int = 300) -> None:
    """Keyed JSON records spread by the default partitioner, with a header; one record of STRAY_KEY elsewhere."""
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        logs = [mgr.get_or_create_log("orders", p) for p in range(PARTITIONS)]
        for i in range(records):
            key = f"user-{i % 40:03d}".encode()
            value = {"i": i, "user": {"email": f"u{i % 40}@example.com", "vip": i % 10 == 0}, "items": [{"sku": f"s{i % 5}"}]}
            logs[default_partition(key, PARTITIONS)].append_records([SimpleRecord(
                key, json.dumps(value).encode(), T0 + i, (("source", b"web" if i % 3 else b"app"),))])
        wrong = (default_partition(STRAY_KEY, PARTITIONS) + 1) % PARTITIONS
        logs[wrong].append_records([SimpleRecord(STRAY_KEY, b"plain text Hello", T0, ())])


def engine_records(config) -> list[tuple[int, Record]]:
    with LogManager.open(config) as mgr:
        return [(p, r) for p in range(PARTITIONS) for r in get_log(mgr, "orders", p).read_records()]


def run(config, **kwargs) -> list[s.SearchStep]:
    return list(s.search(config, ["orders"], **kwargs))


def found(steps) -> list[tuple[int, int]]:
    return [(st["partition"], r["offset"]) for st in steps for r in st["records"]]


def test_murmur2_and_the_default_partition_are_kafka_pythons():
    default = pytest.importorskip("kafka.partitioner.default")
    rng = random.Random(7)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"user-00042"] + [rng.randbytes(rng.randrange(0, 40)) for _ in range(500)]
    for key in keys:
        assert murmur2(key) & 0xFFFFFFFF == default.murmur2(key) & 0xFFFFFFFF, key
        assert default_partition(key, 7) == (default.murmur2(key) & 0x7FFFFFFF) % 7      # toPositive, not abs
    # Kafka's own Utils.murmur2 values (from its test suite), signed as Java's int
    assert murmur2(b"21") == -973932308 and murmur2(b"foobar") == -790332482
    with pytest.raises(ValueError, match="num_partitions"):
        default_partition(b"k", 0)


def test_a_key_is_read_only_in_its_default_partition_when_it_is_there(config):
    fill(config)
    key = b"user-007"
    truth = [(p, r.offset) for p, r in engine_records(config) if r.key == key]
    assert {p for p, _ in truth} == {default_partition(key, PARTITIONS)}
    steps = run(config, key=key, filters=s.Filters(), limit=500)
    assert found(steps) == truth
    assert {st["partition"] for st in steps} == {default_partition(key, PARTITIONS)}       # no other was read
    assert steps[0]["preferred"] and steps[-1]["partitions_total"] == PARTITIONS
    # asked to, it reads the others too (and finds nothing more)
    every = run(config, key=key, filters=s.Filters(), limit=500, every_partition=True)
    assert found(every) == truth and {st["partition"] for st in every} == set(range(PARTITIONS))


def test_a_key_not_in_its_default_partition_is_found_by_scanning_every_partition(config):
    fill(config)
    truth = [(p, r.offset) for p, r in engine_records(config) if r.key == STRAY_KEY]
    assert len(truth) == 1 and truth[0][0] != default_partition(STRAY_KEY, PARTITIONS)
    steps = run(config, key=STRAY_KEY, filters=s.Filters(), limit=50)
    assert found(steps) == truth
    assert [st["partition"] for st in steps if st["partition_done"]][0] == default_partition(STRAY_KEY, PARTITIONS)
    assert [st["partitions_done"] for st in steps if st["partition_done"]] == [1, 2, 3]


def test_filters_keep_what_a_plain_filter_of_the_engines_records_keeps(config):
    fill(config)
    records = engine_records(config)

    def truth(pred):
        return [(p, r.offset) for p, r in records if pred(r)]

    def value(r):
        try:
            return json.loads(r.value)
        except ValueError:
            return None

    cases = [
        (s.parse_filters(text="HELLO"), lambda r: b"hello" in r.value.lower()),
        (s.parse_filters(fields=["user.email=u7@example.com"]), lambda r: (value(r) or {}).get("user", {}).get("email") == "u7@example.com"),
        (s.parse_filters(fields=["user.vip=true", "items.0.sku=s0"]),
         lambda r: (value(r) or {}).get("user", {}).get("vip") is True and value(r)["items"][0]["sku"] == "s0"),
        (s.parse_filters(fields=["i=42"]), lambda r: (value(r) or {}).get("i") == 42),
        (s.parse_filters(fields=["nope"]), lambda r: False),
        (s.parse_filters(headers=["source=app"]), lambda r: ("source", b"app") in r.headers),
        (s.parse_filters(headers=["source"], text="u3@"), lambda r: bool(r.headers) and b"u3@" in r.value),
    ]
    for filters, pred in cases:
        expected = truth(pred)
        assert found(run(config, key=None, filters=filters, limit=500)) == expected, filters
    # a key and a filter together
    key = b"user-010"
    got = found(run(config, key=key, filters=s.parse_filters(fields=["user.vip=true"]), limit=500))
    assert got == truth(lambda r: r.key == key and value(r)["user"]["vip"]) and got


def test_the_view_comes_before_the_filters_and_its_records_are_returned(config):
    fill(config)

    def mask(topic, record):
        assert topic == "orders"
        return {**record, "value": b'{"user": "****"}'}

    assert found(run(config, key=None, filters=s.parse_filters(text="example.com"), limit=500, view=mask)) == []
    masked = run(config, key=b"user-001", filters=s.Filters(), limit=500, view=mask)
    assert masked[0]["records"] and all(r["value"] == b'{"user": "****"}' for st in masked for r in st["records"])


def test_long_scans_come_in_steps_and_the_limit_holds(config):
    fill(config)
    everything = [(p, r.offset) for p, r in engine_records(config) if r.value and b"@example.com" in r.value]
    steps = run(config, key=None, filters=s.parse_filters(text="@example.com"), limit=10_000, step_bytes=2048)
    assert found(steps) == everything
    assert len(steps) > PARTITIONS * 3                       # several steps per partition
    assert [st["partitions_done"] for st in steps if st["partition_done"]] == [1, 2, 3]
    limited = run(config, key=None, filters=s.parse_filters(text="@example.com"), limit=25, step_bytes=2048)
    assert found(limited) == everything[:25]


def test_bad_searches_are_refused_naming_what_is_wrong(config):
    fill(config, records=5)
    with pytest.raises(InvalidRequestError, match="needs a key or a filter"):
        run(config, key=None, filters=s.Filters(), limit=10)
    with pytest.raises(InvalidRequestError, match="path must be names joined by dots"):
        s.parse_filters(fields=["user..email=x"])
    with pytest.raises(InvalidRequestError, match="give a header name"):
        s.parse_filters(headers=["=x"])
    with pytest.raises(InvalidRequestError, match="limit"):
        run(config, key=b"k", filters=s.Filters(), limit=0)
    assert s.plan(config, ["no-such-topic"], b"k") == []
