"""Committed offsets of a group that stays empty expire after offsets.retention.minutes: tombstones are appended
to __consumer_offsets and a coordinator rebuilt from the topic no longer has them; a group that committed later
keeps its offsets. The coordinator runs in process on a real log manager, with the broker's clock a ManualClock:
time passes when the test moves it."""
from __future__ import annotations

import asyncio

import pytest

from storage_engine.clock import ManualClock
from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.server.broker import Broker
from storage_engine.server.groups import records as rec
from storage_engine.server.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator

pytestmark = pytest.mark.unit

RETENTION_MIN = 3
NOW = 1_700_000_000_000


def _config(tmp_path):
    return config_from_mapping({"broker": {"log.dirs": [str(tmp_path / "logs")], "offsets.topic.num.partitions": 2,
                                           "offsets.retention.minutes": RETENTION_MIN}})


def test_offsets_of_an_empty_group_expire_and_stay_gone(tmp_path):
    config = _config(tmp_path)
    clock = ManualClock(NOW)

    async def scenario(broker: Broker) -> tuple[list[str], list[str]]:
        c = broker.groups
        assert await c.commit("idle", -1, "", [("t", 0, 10, -1, "meta"), ("t", 1, 20, -1, None)]) == [0, 0]
        clock.advance(60_000)                                           # "fresh" commits a minute later
        assert await c.commit("fresh", -1, "", [("t", 0, 5, -1, None)]) == [0]
        assert c.groups["fresh"].state_ms == NOW + 60_000
        clock.set(NOW + RETENTION_MIN * 60_000 - 1000)
        early = await c.expire_offsets(clock.milliseconds())
        clock.set(NOW + RETENTION_MIN * 60_000 + 1000)
        late = await c.expire_offsets(clock.milliseconds())
        return early, late

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr, clock=clock)
        try:
            early, late = asyncio.run(scenario(broker))
        finally:
            broker.close()
    assert early == [] and late == ["idle"]

    with LogManager.open(config) as mgr:
        broker = Broker(config, mgr)
        try:
            reloaded = GroupCoordinator(broker)
            reloaded.load()
            assert set(reloaded.groups) == {"fresh"}
            assert reloaded.fetch_offsets("fresh", None) == [("t", [(0, reloaded.groups["fresh"].offsets[("t", 0)])])]
            p = rec.partition_for("idle", 2)
            offsets_log = mgr.get_log(OFFSETS_TOPIC, p)
            assert offsets_log is not None
            kinds = [(rec.parse_key(r.key), r.value is None)
                     for r in offsets_log.read_records() if r.key is not None]
            idle = [(k, tomb) for k, tomb in kinds if getattr(k, "group", None) == "idle"]
            assert [tomb for _, tomb in idle] == [False, False, True, True, True]   # two commits, three tombstones
        finally:
            broker.close()
