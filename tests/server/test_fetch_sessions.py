"""Fetch sessions (KIP-227) on the wire, as Kafka's FetchSession.scala answers them: a full fetch asking for a
session gets an id; incremental fetches with the next epoch answer only the partitions with something new, wait
in the purgatory for an append like any fetch, and forget the forgotten partitions; a wrong epoch, an unknown id, a
session used across the topic-id boundary (v12/v13) answer errors 71, 70, 106 without partitions and leave the
session as it was; epoch -1 closes it; max.incremental.fetch.session.cache.slots = 0 gives no session."""
from __future__ import annotations

import pytest

from tests.server import wire
from tests.server.fetch_wire import answered, fetch_request, produce, records, status
from tests.server.fuzz_campaign import create_topic

pytestmark = pytest.mark.e2e

NOT_FOUND, BAD_EPOCH, TOPIC_ID_ERROR = 70, 71, 106


def test_session_ids_epochs_incremental_replies_forgotten_partitions_and_errors(broker_factory):
    broker = broker_factory()
    create_topic(broker.bootstrap, "sess", 3)
    produce(broker, "sess", 0, [b"a", b"b", b"c"])
    conn = wire.Conn(broker.bootstrap)
    try:
        full = conn.request(fetch_request(12, "sess", {0: 0, 1: 0, 2: 0}, epoch=0), 1)
        sid = int(full.session_id)
        assert int(full.error_code) == 0 and sid != 0
        assert sorted(answered(full)) == [0, 1, 2] and records(answered(full)[0])

        # p0 moved to offset 3, nothing else changed: nothing to answer
        quiet = conn.request(fetch_request(12, "sess", {0: 3}, session_id=sid, epoch=1), 2)
        assert (int(quiet.error_code), int(quiet.session_id), answered(quiet)) == (0, sid, {})

        # an incremental fetch waits in the purgatory; an append to p1 wakes it and only p1 answers
        conn.send(wire.request_frame(fetch_request(12, "sess", {}, session_id=sid, epoch=2, max_wait_ms=60_000), 3))
        produce(broker, "sess", 1, [b"x"])
        corr, woken = wire.decode_response(1, 12, conn.read_frame(60))
        assert corr == 3 and int(woken.session_id) == sid
        assert list(answered(woken)) == [1] and records(answered(woken)[1])
        assert int(answered(woken)[1].high_watermark) == 1

        # errors leave the session as it was: the next right epoch still works
        wrong = conn.request(fetch_request(12, "sess", {}, session_id=sid, epoch=2), 4)
        assert (int(wrong.error_code), int(wrong.session_id), list(wrong.responses)) == (BAD_EPOCH, 0, [])
        unknown = conn.request(fetch_request(12, "sess", {}, session_id=sid ^ 0x5A5A5A5, epoch=1), 5)
        assert (int(unknown.error_code), int(unknown.session_id)) == (NOT_FOUND, 0)
        topic_id = conn.request(wire.metadata_request(12, ["sess"]), 6).topics[0].topic_id
        across = conn.request(fetch_request(13, topic_id, {}, session_id=sid, epoch=3), 7)
        assert (int(across.error_code), int(across.session_id)) == (TOPIC_ID_ERROR, 0)

        # p2 forgotten: an append to it is not answered; p1 at its end answers nothing either
        forget = conn.request(fetch_request(12, "sess", {1: 1}, session_id=sid, epoch=3, forgotten=[2]), 8)
        assert (int(forget.error_code), answered(forget)) == (0, {})
        produce(broker, "sess", 2, [b"y"])
        produce(broker, "sess", 0, [b"d"])
        after = conn.request(fetch_request(12, "sess", {}, session_id=sid, epoch=4), 9)
        assert list(answered(after)) == [0] and int(answered(after)[0].high_watermark) == 4

        # epoch -1 closes the session: a full fetch without one, and the id is gone
        closed = conn.request(fetch_request(12, "sess", {2: 0}, session_id=sid, epoch=-1), 10)
        assert int(closed.session_id) == 0 and records(answered(closed)[2])
        gone = conn.request(fetch_request(12, "sess", {}, session_id=sid, epoch=5), 11)
        assert int(gone.error_code) == NOT_FOUND
    finally:
        conn.close()
    assert broker.stop() == 0
    counted = status(broker)
    assert counted["fetch_sessions_created"] == 1 and counted["fetch_incremental"] == 4
    assert counted["fetch_session_errors"] == 4 and counted["fetch_wakeups"] >= 1


def test_a_session_by_topic_id_and_one_left_empty_is_closed(broker_factory):
    broker = broker_factory()
    create_topic(broker.bootstrap, "by-id", 2)
    produce(broker, "by-id", 1, [b"v"])
    conn = wire.Conn(broker.bootstrap)
    try:
        topic_id = conn.request(wire.metadata_request(12, ["by-id"]), 1).topics[0].topic_id
        full = conn.request(fetch_request(13, topic_id, {0: 0, 1: 0}, epoch=0), 2)
        sid = int(full.session_id)
        assert sid != 0 and [t.topic_id for t in full.responses] == [topic_id]
        produce(broker, "by-id", 0, [b"w"])
        incremental = conn.request(fetch_request(13, topic_id, {1: 1}, session_id=sid, epoch=1), 3)
        assert list(answered(incremental)) == [0] and records(answered(incremental)[0])
        assert int(conn.request(fetch_request(12, "by-id", {}, session_id=sid, epoch=2), 4).error_code) \
            == TOPIC_ID_ERROR
        # forgetting every partition closes the session: a sessionless reply (id 0), the id unknown after
        emptied = conn.request(fetch_request(13, topic_id, {}, session_id=sid, epoch=2, forgotten=[0, 1]), 5)
        assert (int(emptied.error_code), int(emptied.session_id)) == (0, 0)
        assert int(conn.request(fetch_request(13, topic_id, {}, session_id=sid, epoch=3), 6).error_code) \
            == NOT_FOUND
    finally:
        conn.close()


def test_no_session_with_zero_slots(broker_factory):
    broker = broker_factory(broker={"max.incremental.fetch.session.cache.slots": 0})
    create_topic(broker.bootstrap, "nosess", 1)
    produce(broker, "nosess", 0, [b"v"])
    conn = wire.Conn(broker.bootstrap)
    try:
        full = conn.request(fetch_request(12, "nosess", {0: 0}, epoch=0), 1)
        assert (int(full.error_code), int(full.session_id)) == (0, 0) and records(answered(full)[0])
        # the client keeps sending full fetches; an incremental one names a session that does not exist
        assert int(conn.request(fetch_request(12, "nosess", {}, session_id=1, epoch=1), 2).error_code) == NOT_FOUND
    finally:
        conn.close()
