"""Producers and transactions from the command line (real subprocesses): produce with a producer id, end-txn,
consume at both isolation levels, expire-producers, and dump-log of .txnindex and .snapshot files."""
from __future__ import annotations

import os

import pytest

from storage_engine import layout

from .test_cli import Cli, records

pytestmark = pytest.mark.e2e
T0 = 1_700_000_000_000


@pytest.fixture
def cli(tmp_path):
    return Cli(tmp_path, broker={"log.segment.bytes": 2048, "producer.id.expiration.ms": 60_000})


def txn(cli, pid, lines, seq, *extra):
    return cli.produce("t", 0, lines, "--producer-id", pid, "--epoch", 0, "--base-sequence", seq, "--transactional",
                       *extra)


def test_transactions_from_the_command_line(cli):
    out = txn(cli, 1, records(2), 0)                                  # 0-1, committed later
    assert out["base_offset"] == 0 and out["duplicate_batches"] == 0
    txn(cli, 2, records(2, start=10), 0)                              # 2-3, aborted later
    idem = cli.produce("t", 0, records(1, start=20), "--producer-id", 3, "--epoch", 0, "--base-sequence", 0)
    retry = cli.produce("t", 0, records(1, start=20), "--producer-id", 3, "--epoch", 0, "--base-sequence", 0)
    assert (idem["base_offset"], retry["base_offset"], retry["duplicate_batches"]) == (4, 4, 1)
    assert cli.consume("t", 0, "--isolation-level", "read_committed") == []
    end = cli.json("end-txn", "--topic", "t", "--partition", 0, "--producer-id", 1, "--epoch", 0, "--commit",
                   "--coordinator-epoch", 4, "--now-ms", T0 + 50)
    assert end == {"topic": "t", "partition": 0, "producer_id": 1, "epoch": 0, "marker": "COMMIT", "offset": 5,
                   "last_stable_offset": 2}
    end = cli.json("end-txn", "--topic", "t", "--partition", 0, "--producer-id", 2, "--epoch", 0, "--abort",
                   "--now-ms", T0 + 60)   # (a marker stamped with today's clock would roll the segment: segment.ms)
    assert end["offset"] == 6 and end["last_stable_offset"] == 7
    committed = cli.consume("t", 0, "--isolation-level", "read_committed")
    assert [(r["offset"], r["key"]) for r in committed] == [(0, "k0"), (1, "k1"), (4, "k20")]
    everything = cli.consume("t", 0)
    assert [r["offset"] for r in everything] == [0, 1, 2, 3, 4]      # no markers, the retry once
    assert cli.consume("t", 0, "--isolation-level", "read_uncommitted") == everything

    # refusals name Kafka's errors and store nothing
    rc, err = cli.produce("t", 0, records(1), "--producer-id", 3, "--epoch", 0, "--base-sequence", 7, expect=2)
    assert "OUT_OF_ORDER_SEQUENCE_NUMBER" in err
    rc, _, err = cli.run("end-txn", "--topic", "t", "--partition", 0, "--producer-id", 1, "--epoch", 0, "--commit",
                         "--coordinator-epoch", 2, expect=2)
    assert "TRANSACTION_COORDINATOR_FENCED" in err
    rc, _, err = cli.run("end-txn", "--topic", "t", "--partition", 0, "--producer-id", 1, "--epoch", 0, expect=2)
    assert "one of the arguments --commit --abort is required" in err
    rc, _, err = cli.run("end-txn", "--topic", "t", "--partition", 0, "--producer-id", 1, "--epoch", 40000,
                         "--abort", expect=2)
    assert "producer epoch must be in [0, 32767]" in err
    rc, err = cli.produce("t", 0, records(1), "--transactional", expect=2)
    assert "need --producer-id" in err
    rc, _, err = cli.run("end-txn", "--topic", "nope", "--partition", 0, "--producer-id", 1, "--epoch", 0,
                         "--abort", expect=2)
    assert "nope-0 does not exist" in err
    assert [r["offset"] for r in cli.consume("t", 0)] == [0, 1, 2, 3, 4]

    # dump-log: the .txnindex and the snapshot a clean close wrote, as kafka-dump-log.sh prints them
    d = cli.partition_dir("t", 0)
    _, out, _ = cli.dump(os.path.join(d, "00000000000000000000.txnindex"))
    assert out.splitlines()[1:] == ["version: 0 producerId: 2 firstOffset: 2 lastOffset: 6 lastStableOffset: 7"]
    snaps = sorted(f for f in os.listdir(d) if f.endswith(layout.SNAPSHOT_SUFFIX))
    assert snaps[-1] == "00000000000000000007.snapshot"
    _, out, _ = cli.dump(os.path.join(d, snaps[-1]))
    lines = out.splitlines()[1:]
    assert len(lines) == 3
    assert lines[0].startswith("producerId: 1 producerEpoch: 0 coordinatorEpoch: 4 currentTxnFirstOffset: "
                               "OptionalLong.empty lastTimestamp: ")
    assert lines[0].endswith(" firstSequence: 0 lastSequence: 1 lastOffset: 1 offsetDelta: 1 timestamp: "
                             + lines[0].split("lastTimestamp: ")[1].split(" ")[0])
    assert lines[2].startswith("producerId: 3 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
                               "OptionalLong.empty lastTimestamp: 1700000000020 firstSequence: 0 lastSequence: 0 "
                               "lastOffset: 4 offsetDelta: 0 timestamp: 1700000000020")
    # the batch lines carry the producer fields and the leader epoch the log stamped
    _, out, _ = cli.dump(os.path.join(d, "00000000000000000000.log"))
    assert ("baseOffset: 2 lastOffset: 3 count: 2 baseSequence: 0 lastSequence: 1 producerId: 2 producerEpoch: 0 "
            "partitionLeaderEpoch: 0 isTransactional: true isControl: false") in out
    assert "baseOffset: 6 lastOffset: 6 count: 1 baseSequence: -1 lastSequence: -1 producerId: 2" in out
    # a corrupt snapshot: Kafka's message, exit 1
    bad = os.path.join(str(cli.tmp), "00000000000000000009.snapshot")
    with open(os.path.join(d, snaps[-1]), "rb") as f:
        data = bytearray(f.read())
    data[-1] ^= 1
    with open(bad, "wb") as out:
        out.write(data)
    _, out, err = cli.dump(bad, expect=1)
    assert "Snapshot is corrupt (CRC is no longer valid)" in err or "snapshot is corrupt (CRC is no longer valid)" in err


def test_expire_producers(cli):
    cli.produce("t", 0, records(1), "--producer-id", 5, "--epoch", 0, "--base-sequence", 0)      # ts T0
    txn(cli, 6, records(1, start=1), 0)                                                           # open txn
    dry = cli.json("expire-producers", "--now-ms", T0 + 60_000, "--dry-run")
    assert dry["partitions"][0]["expired_producer_ids"] == [5] and dry["dry_run"]
    assert cli.json("expire-producers", "--now-ms", T0 + 59_999)["nothing_to_do"]
    done = cli.json("expire-producers", "--now-ms", T0 + 60_000)
    assert done["producers_expired"] == 1 and done["partitions"][0]["producers"] == 1
    assert done["partitions"][0]["open_transactions"] == 1
    # the expired producer is unknown now: any sequence is accepted again (Kafka's rule)
    out = cli.produce("t", 0, records(1, start=2), "--producer-id", 5, "--epoch", 0, "--base-sequence", 9)
    assert out["duplicate_batches"] == 0
    assert cli.json("expire-producers", "--now-ms", T0 + 60_000, "--topic", "t")["nothing_to_do"]
    rc, _, err = cli.run("expire-producers", "--topic", "nope", expect=2)
    assert "unknown topic" in err
