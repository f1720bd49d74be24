"""Requests sent back to back on one connection (pipelined, as librdkafka and the Java client send them): answered
one at a time and in order, whether a request waits (a fetch in the purgatory, while the connection reads the
next frames) or is answered at once (the connection reads the next frame itself, no read-ahead task), and
whichever of the two the connection goes back and forth between."""
from __future__ import annotations

import pytest

from tests.server import wire
from tests.server.broker_proc import wait_until
from tests.server.fetch_wire import answered, fetch_request, produce, records, status
from tests.server.fuzz_campaign import create_topic

pytestmark = pytest.mark.e2e


def _answers(conn: wire.Conn, expected: list[tuple[int, int, int]]) -> list[object]:
    """The next responses, which must carry the correlation ids of ``expected`` ((id, api key, version)), in
    that order."""
    out = []
    for corr_want, key, version in expected:
        corr, body = wire.decode_response(key, version, conn.read_frame(120))
        assert corr == corr_want, (corr, corr_want)
        out.append(body)
    return out


def test_pipelined_requests_are_answered_in_order_around_a_waiting_fetch(broker_factory):
    broker = broker_factory()
    create_topic(broker.bootstrap, "piped", 1)
    produce(broker, "piped", 0, [b"first"])
    conn = wire.Conn(broker.bootstrap)
    try:
        # answered at once, sent in one piece: each is read and answered before the next is read
        conn.send(b"".join(wire.request_frame(wire.api_versions(3), c) for c in (1, 2, 3)) +
                  wire.request_frame(fetch_request(12, "piped", {0: 0}), 4))
        *_, fetched = _answers(conn, [(1, 18, 3), (2, 18, 3), (3, 18, 3), (4, 1, 12)])
        assert b"first" in records(answered(fetched)[0])
        # a fetch that waits (nothing past offset 1) with requests behind it: they are read meanwhile and
        # answered after it, in order, once an append wakes it
        conn.send(wire.request_frame(fetch_request(12, "piped", {0: 1}, max_wait_ms=600_000), 5) +
                  b"".join(wire.request_frame(wire.api_versions(3), c) for c in (6, 7)) +
                  wire.request_frame(fetch_request(12, "piped", {0: 0}), 8))
        wait_until("the fetch waiting in the purgatory", lambda: status(broker).get("fetch_waits", 0) >= 1, 30)
        produce(broker, "piped", 0, [b"second"])
        woken, _, _, again = _answers(conn, [(5, 1, 12), (6, 18, 3), (7, 18, 3), (8, 1, 12)])
        assert b"second" in records(answered(woken)[0])
        assert b"first" in records(answered(again)[0]) and b"second" in records(answered(again)[0])
        # and back to requests answered at once, one at a time and several in one piece
        for c in (9, 10):
            conn.send(wire.request_frame(wire.api_versions(3), c))
            _answers(conn, [(c, 18, 3)])
        conn.send(b"".join(wire.request_frame(wire.api_versions(3), c) for c in (11, 12, 13)))
        _answers(conn, [(11, 18, 3), (12, 18, 3), (13, 18, 3)])
    finally:
        conn.close()
    assert "Traceback" not in broker.log_text()
    assert broker.stop() == 0
