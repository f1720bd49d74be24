"""Damage and failures that runs found stay reported (:func:`storage_maintenance.reporting.history.open_problems`) until a
later run of the same check finds them gone: the audit of ``log_verify``, and the batches of ``log_retention``
that failed on a partition; what the files show now is :mod:`storage_engine.inspection.status`'s part."""
from __future__ import annotations

import datetime

import pytest

from storage_engine.inspection import listing, status

from .conftest import parse_dag, run_results
from .rerun import rerun
from .storage_fixtures import T, old_then_recent

pytestmark = pytest.mark.airflow
DAY = datetime.timedelta(days=1)


def all_open_problems() -> dict:
    from airflow.utils.session import create_session
    from storage_maintenance.reporting import history

    with create_session() as session:
        return history.open_problems(session)


_BASELINE: set = set()


def open_problems() -> dict:
    """The open problems, less those other test modules' runs left in the session's metadata DB on partitions of
    the same names (one Airflow serves one storage config; the tests share one DB across many)."""
    out: dict = {}
    for tp, problems in all_open_problems().items():
        mine = [p for p in problems if (tp, p["run_id"], p["source"], p["task"]) not in _BASELINE]
        if mine:
            out[tp] = mine
    return out


@pytest.fixture(autouse=True)
def baseline():
    _BASELINE.clear()
    _BASELINE.update((tp, p["run_id"], p["source"], p["task"]) for tp, ps in all_open_problems().items() for p in ps)
    yield


@pytest.fixture
def logs(storage):
    for p in (0, 1):
        storage.produce("events", p, old_then_recent(30, 5))
    storage.produce("audit", 0, old_then_recent(10, 0))
    return storage


def test_damage_found_by_the_audit_stays_until_a_later_audit_finds_it_gone(logs):
    sealed = sorted(logs.partition_dir("events", 1).glob("*.log"))[0]
    good = sealed.read_bytes()
    bad = bytearray(good)
    bad[120] ^= 0xFF
    sealed.write_bytes(bytes(bad))
    verify = parse_dag("log_verify")
    found = verify.test(logical_date=T)
    assert found.state == "failed"
    assert status.overview(logs.config())["damaged"] == []      # the files' markers do not show a CRC error

    problems = open_problems()
    assert set(problems) == {("events", 1)}
    (problem,) = problems[("events", 1)]
    assert (problem["kind"], problem["source"], problem["task"], problem["run_id"]) == (
        "damaged", "log_verify", "verify", found.run_id)
    assert str(sealed) in problem["message"] and "batch at position 120" in problem["message"]

    # Other DAGs' runs do not clear it; a rerun of the same audit over the same bytes finds it again.
    assert parse_dag("log_checkpoint").test(logical_date=T).state == "success"
    again = rerun(verify, found)
    assert again.state == "failed"
    assert [p["run_id"] for p in open_problems()[("events", 1)]] == [found.run_id]

    sealed.write_bytes(good)                                       # repaired
    assert set(open_problems()) == {("events", 1)}                 # still reported: no audit has looked since
    clean = verify.test(logical_date=T + DAY)
    assert clean.state == "success"
    assert open_problems() == {}


def test_a_partition_maintenance_failed_on_stays_reported_until_a_later_run_maintains_it(logs):
    pdir = logs.partition_dir("events", 0)
    victim = sorted(pdir.glob("*.log"))[1]
    saved = victim.read_bytes()
    victim.unlink()
    victim.mkdir()                                                 # a .log replaced by a directory
    retention = parse_dag("log_retention")
    failed = retention.test(logical_date=T)
    assert failed.state == "failed"
    problems = open_problems()
    assert set(problems) == {("events", 0)}
    assert {(p["kind"], p["source"], p["task"]) for p in problems[("events", 0)]} == {
        ("failed", "log_retention", "retention"), ("failed", "log_retention", "expire_producers")}
    assert all("PartitionUnreadableError" in p["message"] and p["run_id"] == failed.run_id
               for p in problems[("events", 0)])

    victim.rmdir()
    victim.write_bytes(saved)                                      # repaired: the files show nothing any more
    (row,) = [r for r in listing.list_partition_status(logs.config(), topics=["events"])["partitions"]
              if r["partition"] == 0]
    assert row["damage"] == []
    assert set(open_problems()) == {("events", 0)}                 # until a later retention run maintains it
    later = retention.test(logical_date=T + datetime.timedelta(minutes=5))
    assert later.state == "success"
    assert any(r["topic"] == "events" and r["partition"] == 0
               for (task, _), b in run_results(later).items() if task == "retention" for r in b["results"])
    assert open_problems() == {}
