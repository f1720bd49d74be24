"""Load rules at their boundaries (MUTATION.md: what the mutants of loader.py showed the other tests let through).

Kafka's ``LogLoader.removeTempFilesAndCollectSwapFiles`` deletes every temporary file it finds before loading; this
engine writes producer snapshots atomically (``<name>.snapshot.tmp``, fsync, rename), so a ``.snapshot.tmp`` is a
snapshot whose writer died before the rename, and the first opener deletes it (the snapshot itself is rebuilt).
"""
from __future__ import annotations

import os

import pytest

from storage_engine import layout

from ..helpers import open_log, partition_dir, read_all, recs

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_half_written_producer_snapshot_is_deleted_at_load(log_dir, clean):
    log, _ = open_log(log_dir, now_ms=T0)
    log.append_records(recs("a", "b", timestamp=T0), producer_id=3, producer_epoch=0, base_sequence=0)
    log.close(clean=True)
    pdir = partition_dir(log_dir)
    torn = os.path.join(pdir, layout.filename_prefix(2) + layout.SNAPSHOT_SUFFIX + layout.TMP_SUFFIX)
    with open(torn, "wb") as f:
        f.write(b"\x00\x01")
    # a file that only looks alike is not the engine's and stays
    other = os.path.join(pdir, "notes.tmp")
    with open(other, "wb") as f:
        f.write(b"x")

    log, res = open_log(log_dir, now_ms=T0, had_clean_shutdown=clean)
    assert not os.path.exists(torn)
    assert os.path.basename(torn) in res.deleted_files
    assert os.path.exists(other)
    assert read_all(log) == [(0, b"a"), (1, b"b")]
    # the producer's state survived: a retry of its batch is a duplicate
    assert log.append_records(recs("a", "b", timestamp=T0), producer_id=3, producer_epoch=0,
                              base_sequence=0).duplicate
    log.close(clean=True)
