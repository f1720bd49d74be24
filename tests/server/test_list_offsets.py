"""ListOffsets' special timestamps over the raw wire: MAX_TIMESTAMP (-3) answers the first record carrying the
largest timestamp, as Kafka 3.8+ does (not the batch's last offset); on a broker without tiered storage
earliest-local (-4) is the log start and latest-tiered (-5) answers offset -1 with leader epoch -1, as Kafka 3.9's
``UnifiedLog.fetchOffsetByTimestamp`` does; a special timestamp the request's version does not know is refused for
that partition with UNSUPPORTED_VERSION (``ReplicaManager.timestampMinSupportedVersion``)."""
from __future__ import annotations

import pytest

from storage_engine.record.record_batch import build_batch
from tests.server import wire

pytestmark = pytest.mark.e2e


def _offset(conn, topic, timestamp, version=9, error=0):
    resp = conn.request(wire.list_offsets_request(version, topic, [0], timestamp))
    part = resp.topics[0].partitions[0]
    assert part.error_code == error, part
    return part.timestamp, part.offset


def test_special_timestamps(broker):
    conn = wire.Conn(broker.bootstrap)
    conn.request(wire.metadata_request(12, ["ts"], allow_auto=True))
    batches = [build_batch([(b"k", b"v%d" % i, ts, ()) for i, ts in enumerate(stamps)])
               for stamps in ([1000, 1000, 1000], [2000, 9000, 3000, 9000, 1500], [4000, 4000])]
    for data in batches:
        resp = conn.request(wire.produce_request(9, "ts", 0, data))
        assert resp.responses[0].partition_responses[0].error_code == 0
    ts, offset = _offset(conn, "ts", -3)
    assert (int(ts.timestamp() * 1000) if hasattr(ts, "timestamp") else ts, offset) == (9000, 4)
    assert _offset(conn, "ts", -4)[1] == 0
    assert _offset(conn, "ts", -5)[1] == -1
    part = conn.request(wire.list_offsets_request(9, "ts", [0], -5)).topics[0].partitions[0]
    assert part.leader_epoch == -1
    for timestamp, first_version in ((-3, 7), (-4, 8), (-5, 9)):
        assert _offset(conn, "ts", timestamp, first_version - 1, error=35)[1] == -1
    assert _offset(conn, "ts", -6, 9, error=35)[1] == -1      # -6 needs v11, not served
    assert _offset(conn, "ts", -2, 1)[1] == 0
    assert _offset(conn, "ts", -2)[1] == 0 and _offset(conn, "ts", -1)[1] == 10
    assert _offset(conn, "ts", 8999)[1] == 4          # the first record at or after the time
    assert _offset(conn, "ts", 9001)[1] == -1
    conn.close()
