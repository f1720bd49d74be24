"""Planning moves between log dirs (``balance_plan``): which partitions go where, by either measure."""
from __future__ import annotations

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.errors import InvalidRequestError
from storage_engine.log.manager import LogManager
from storage_engine.jobs import lifecycle
from storage_engine.record.records import SimpleRecord

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000


@pytest.fixture
def cfg(tmp_path):
    config = config_from_mapping({"broker": {"log.dirs": [str(tmp_path / d) for d in ("a", "b", "c")]}})
    sizes = {("x", 0): 60, ("y", 0): 5, ("z", 0): 5, ("x", 1): 40, ("x", 2): 30}   # a: x-0, x-1; b: y-0, x-2; c: z-0
    with LogManager.open(config, clock=ManualClock(T0)) as mgr:
        for (topic, p), n in sizes.items():
            log = mgr.get_or_create_log(topic, p)
            for i in range(n):
                log.append_records([SimpleRecord(b"k", b"v" * 100, T0)])
    return config


def test_moves_go_largest_first_to_the_least_used_dir_until_under_the_limit(cfg):
    a, b, c = cfg.log_dirs
    usage = {u["log_dir"]: u for u in lifecycle.log_dir_usage(cfg)}
    assert [p["topic"] + str(p["partition"]) for p in usage[a]["partitions"]] == ["x0", "x1"]
    size = {(p["topic"], p["partition"]): p["size_bytes"] for u in usage.values() for p in u["partitions"]}
    limit = usage[a]["data_bytes"] - 1                 # only a is over; moving x-1 (smaller) would do, x-0 first
    plan = lifecycle.balance_plan(cfg, max_dir_bytes=limit)
    assert [(m["topic"], m["partition"], m["from_dir"], m["to_dir"]) for m in plan["moves"]] == [("x", 0, a, c)]
    assert plan["moves"][0]["size_bytes"] == size[("x", 0)]
    dirs = {d["log_dir"]: d for d in plan["dirs"]}
    assert dirs[a]["over"] and dirs[a]["usage_after"] == usage[a]["data_bytes"] - size[("x", 0)]
    assert dirs[c]["usage_after"] == usage[c]["data_bytes"] + size[("x", 0)] and plan["still_over"] == []
    assert lifecycle.balance_plan(cfg, max_dir_bytes=10**9)["nothing_to_do"]
    assert lifecycle.balance_plan(cfg, max_dir_bytes=limit, topics=["y"])["moves"] == []
    # No dir can take anything without going over: nothing is planned, the dirs are reported as still over.
    tight = lifecycle.balance_plan(cfg, max_dir_bytes=size[("y", 0)])
    assert tight["moves"] == [] and set(tight["still_over"]) == {a, b}


def test_by_filesystem_use_dirs_on_one_filesystem_are_not_balanced(cfg):
    plan = lifecycle.balance_plan(cfg, max_used_percent=0.0001)
    assert plan["measure"] == "fs_used_percent" and plan["moves"] == []
    assert set(plan["still_over"]) == set(cfg.log_dirs), "over, but moving within one filesystem frees nothing"


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one"), ({"max_used_percent": 50, "max_dir_bytes": 5}, "exactly one"),
    ({"max_used_percent": 0}, r"\(0, 100\]"), ({"max_used_percent": "90"}, r"\(0, 100\]"),
    ({"max_dir_bytes": -1}, ">= 0"), ({"max_dir_bytes": 5, "max_moves": 0}, "max_moves"),
])
def test_bad_thresholds(cfg, kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        lifecycle.balance_plan(cfg, **kwargs)
