"""``verify`` checks tiered partitions' remote segments against a real SeaweedFS, and a remote segment's parts are
known (its parts manifest), so an object deleted or replaced behind the store's back is reported as loss or damage
with the topic, partition and offsets, and never read as data (a deleted ``.txnindex`` is never "no aborted
transactions"). The CLI runs in its own process, as an operator runs it; the tiering job is the real one."""
from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator

import pytest

from storage_engine.config_file import load_config
from storage_engine.jobs.tiering import tier
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.tiered import parts
from storage_engine.tiered.context import TierContext
from storage_engine.tiered.keys import segment_keys
from tests.tiered.conftest import s3_client
from tests.tiered.tier_helpers import TOPIC, bucket_objects, cli, remote_segments, write_config

pytestmark = [pytest.mark.tiered]

PID = 7000
ABORTED = b"aborted-"
T0 = 1_700_000_000_000


def _fill(cfg: str) -> None:
    """Plain records, then an aborted transaction whose ABORT marker lands in the segment after its records (that
    segment's ``.txnindex`` names it), then more plain records; every segment but the active one copyable."""
    with LogManager.open(load_config(cfg)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for i in range(30):
            log.append_records([SimpleRecord(None, b"plain-%03d-" % i * 8, T0 + i)])
        for i in range(3):
            log.append_records([SimpleRecord(None, ABORTED + b"%03d-" % i * 8, T0 + 30 + i)], producer_id=PID,
                               producer_epoch=0, base_sequence=i, is_transactional=True)
        log.roll()
        log.append_end_txn(PID, 0, commit=False)
        for i in range(30, 60):
            log.append_records([SimpleRecord(None, b"plain-%03d-" % i * 8, T0 + 40 + i)])
        log.roll()
        log.flush()


def _tier(cfg: str) -> None:
    summary = tier(load_config(cfg), None, topics=[TOPIC])
    assert not summary["failures"] and not summary["errors"], summary


@pytest.fixture
def legacy_copies(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Copies made as before parts manifests: the COPY_SEGMENT_FINISHED record carries no custom metadata."""
    finished = TierContext.copy_finished
    monkeypatch.setattr(TierContext, "copy_finished", lambda self, seg, custom_metadata=None: finished(self, seg))
    yield


def _verify(cfg: str, *args: str) -> tuple[int, dict, str]:
    done = cli(cfg, "verify", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def _keys(seg: object) -> dict[str, str]:
    return segment_keys("", TOPIC, seg.topic_id, 0, seg.start_offset, seg.segment_id)  # type: ignore[attr-defined]


def _consume(cfg: str, isolation: str) -> subprocess.CompletedProcess[str]:
    return cli(cfg, "consume", "--topic", TOPIC, "--partition", "0", "--from-offset", "0",
               "--isolation-level", isolation)


def test_the_copy_records_its_parts_and_verify_reports_each_object_lost_or_replaced_with_its_offsets(
        tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, local_retention_bytes=0)
    _fill(cfg)
    _tier(cfg)
    segs = remote_segments(cfg)
    assert len(segs) >= 4
    objects = bucket_objects(weed, bucket)
    with_txns = []
    for seg in segs:
        manifest = parts.of_segment(seg)
        assert manifest is not None and len(seg.custom_metadata or b"") <= parts.MAX_BYTES
        keys = _keys(seg)
        # the manifest lists exactly the objects the copy left, with their sizes
        assert {keys[s]: p.size for s, p in manifest.parts.items()} == {k: v for k, v in objects.items()
                                                                       if k in keys.values()}
        if manifest.has("txnindex"):
            with_txns.append(seg)
    (txn_seg,) = with_txns                  # the segment holding the ABORT marker
    rc, report, stderr = _verify(cfg)
    assert rc == 0, stderr
    remote = report["remote"]
    assert remote["checked"] and remote["problems"] == [] and remote["segments"] == len(segs)
    assert remote["objects"] == 5 * len(segs) + 1 and remote["txnindex_unchecked"] == 0

    # The .txnindex deleted behind the store's back: read_committed fails naming the loss, never serves the
    # aborted records as committed; read_uncommitted needs no .txnindex and reads on.
    s3 = s3_client(weed)
    s3.delete_object(Bucket=bucket, Key=_keys(txn_seg)["txnindex"])
    committed = _consume(cfg, "read_committed")
    assert committed.returncode == 1
    assert _keys(txn_seg)["txnindex"] in committed.stderr and "missing" in committed.stderr
    assert f"offsets {txn_seg.start_offset} to {txn_seg.end_offset}" in committed.stderr
    assert ABORTED not in committed.stdout.encode()
    uncommitted = _consume(cfg, "read_uncommitted")
    assert uncommitted.returncode == 0, uncommitted.stderr
    assert uncommitted.stdout.count("aborted-") == 3

    # One more object deleted, one replaced by as many other bytes (its ETag differs): three problems.
    lost, replaced = segs[0], segs[-1]
    s3.delete_object(Bucket=bucket, Key=_keys(lost)["log"])
    size = objects[_keys(replaced)["index"]]
    s3.put_object(Bucket=bucket, Key=_keys(replaced)["index"], Body=b"\0" * size)
    rc, report, stderr = _verify(cfg)
    assert rc == 1
    found = {(p["kind"], p["start_offset"], p["end_offset"], p["file"]) for p in report["problems"]}
    assert found == {("missing", txn_seg.start_offset, txn_seg.end_offset, f"s3://{bucket}/{_keys(txn_seg)['txnindex']}"),
                     ("missing", lost.start_offset, lost.end_offset, f"s3://{bucket}/{_keys(lost)['log']}"),
                     ("damaged", replaced.start_offset, replaced.end_offset,
                      f"s3://{bucket}/{_keys(replaced)['index']}")}
    assert all(p["topic"] == TOPIC and p["partition"] == 0 for p in report["problems"])
    assert report["damaged"] is True
    for p in report["problems"]:                       # one stderr line each, naming the object and the offsets
        assert f"{p['file']}: remote segment [{p['start_offset']}, {p['end_offset']}] of {TOPIC}-0" in stderr
    # the local half is still reported
    assert [(p["topic"], p["partition"]) for p in report["partitions"] if p["topic"] == TOPIC] == [(TOPIC, 0)]


def test_segments_copied_before_manifests_still_read_and_deep_finds_same_size_damage(
        tmp_path, weed, bucket, legacy_copies):
    cfg = write_config(tmp_path, weed, bucket, local_retention_bytes=0)
    _fill(cfg)
    _tier(cfg)
    segs = remote_segments(cfg)
    assert segs and all(s.custom_metadata is None and parts.of_segment(s) is None for s in segs)
    rc, report, stderr = _verify(cfg, "--deep")
    assert rc == 0, stderr
    remote = report["remote"]
    assert remote["checked"] and remote["txnindex_unchecked"] == len(segs) and remote["objects"] == 5 * len(segs)
    assert remote["bytes_read"] >= sum(s.size_bytes for s in segs)
    # They read as before (a missing .txnindex means none, the only answer a segment without a manifest allows).
    committed = _consume(cfg, "read_committed")
    assert committed.returncode == 0, committed.stderr
    assert ABORTED not in committed.stdout.encode() and committed.stdout.count("\"value\": \"plain-") == 60
    # A .log replaced by as many garbage bytes: no size or ETag was recorded to tell, the HEAD check passes; the
    # deep check reads the batches and reports the damage with the offsets.
    victim = segs[1]
    key = _keys(victim)["log"]
    s3_client(weed).put_object(Bucket=bucket, Key=key, Body=b"\x07" * victim.size_bytes)
    rc, _, _ = _verify(cfg)
    assert rc == 0
    rc, report, stderr = _verify(cfg, "--deep")
    assert rc == 1
    (problem,) = report["problems"]
    assert (problem["kind"], problem["file"], problem["start_offset"], problem["end_offset"]) == (
        "damaged", f"s3://{bucket}/{key}", victim.start_offset, victim.end_offset)
    assert f"s3://{bucket}/{key}" in stderr


def test_a_segment_remote_retention_deletes_during_the_check_is_no_loss(tmp_path, weed, bucket, monkeypatch):
    """Remote retention announces a deletion (DELETE_SEGMENT_STARTED, fsynced) before its objects go: a segment
    deleted between the check's reading of the metadata and its HEADs is not reported. (In process: the deletion
    is run, by the tiering job's own step, at the moment the first HEAD is sent.)"""
    import threading

    from storage_engine.clock import clock_at
    from storage_engine.inspection.verify_remote import verify_remote
    from storage_engine.tiered.object_store import ObjectStore
    from storage_engine.tiered.remote_log import RemoteLogView
    from storage_engine.tiered.settings import RemoteStorageSettings

    cfg = write_config(tmp_path, weed, bucket)
    _fill(cfg)
    _tier(cfg)
    config = load_config(cfg)
    segs = remote_segments(cfg)
    doomed, lost = segs[0], segs[1]
    s3_client(weed).delete_object(Bucket=bucket, Key=_keys(lost)["log"])      # a real loss, for contrast
    head, mutex, done = ObjectStore.head, threading.Lock(), list[bool]()

    def head_after_retention(self: ObjectStore, key: str, offsets: tuple[int, int] | None = None) -> tuple[int, str]:
        with mutex:
            if not done:
                settings = RemoteStorageSettings.of(config)
                store = ObjectStore(settings)
                with LogManager.open(config) as mgr:
                    ctx = TierContext(mgr, settings, store, RemoteLogView.load(mgr), clock_at(None).milliseconds())
                    ctx.delete_objects(doomed)
                store.close()
                done.append(True)
        return head(self, key, offsets)

    monkeypatch.setattr(ObjectStore, "head", head_after_retention)
    report = verify_remote(config)
    assert done and report["checked"]
    assert [(p["kind"], p["start_offset"]) for p in report["problems"]] == [("missing", lost.start_offset)]


def _delete_remote(cfg: str, seg: object) -> None:
    """Delete a finished segment as the tiering job's deletion does (DELETE_SEGMENT_STARTED, its objects,
    DELETE_SEGMENT_FINISHED): what a mistaken remote retention would leave."""
    from storage_engine.clock import clock_at
    from storage_engine.tiered.object_store import ObjectStore
    from storage_engine.tiered.remote_log import RemoteLogView
    from storage_engine.tiered.settings import RemoteStorageSettings

    config = load_config(cfg)
    settings = RemoteStorageSettings.of(config)
    store = ObjectStore(settings)
    try:
        with LogManager.open(config) as mgr:
            TierContext(mgr, settings, store, RemoteLogView.load(mgr), clock_at(None).milliseconds()
                        ).delete_objects(seg)  # type: ignore[arg-type]
    finally:
        store.close()


def test_offsets_between_the_remote_segments_and_the_local_log_that_neither_holds_are_reported_lost(
        tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket, local_retention_bytes=0)
    _fill(cfg)
    _tier(cfg)
    segs = remote_segments(cfg)
    last = segs[-1]
    _delete_remote(cfg, last)           # every local copy below the active segment is gone: these offsets too
    rc, report, stderr = _verify(cfg)
    assert rc == 1
    (problem,) = report["problems"]
    assert (problem["kind"], problem["topic"], problem["partition"], problem["start_offset"],
            problem["end_offset"]) == ("gap", TOPIC, 0, last.start_offset, last.end_offset)
    assert f"offsets [{last.start_offset}, {last.end_offset}] of {TOPIC}-0" in stderr and "lost" in stderr


def _dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_an_unreachable_store_is_one_error_naming_it_and_the_local_report_still_prints(tmp_path, weed, bucket):
    cfg = write_config(tmp_path, weed, bucket)
    _fill(cfg)
    _tier(cfg)
    dead = _dead_endpoint()
    cfg = write_config(tmp_path, weed, bucket, endpoint=dead)      # the same log dirs, the store gone
    rc, report, stderr = _verify(cfg)
    assert rc == 0, stderr                      # not damage to stored data, as an offline log dir
    assert report["remote"]["checked"] is False and dead in report["remote"]["error"]
    assert "rsm.config.storage.s3.endpoint.url" in report["remote"]["fix"]
    assert dead in stderr and "remote segments not verified" in stderr
    assert [p for p in report["partitions"] if p["topic"] == TOPIC][0]["segments"] >= 3
    rc, _, _ = _verify(cfg, "--strict")
    assert rc == 1
    rc, report, stderr = _verify(cfg, "--local-only")
    assert rc == 0 and "remote" not in report and stderr == ""


@pytest.mark.unit
def test_the_parts_manifest_round_trips_fits_kafkas_limit_and_refuses_damage():
    big = parts.Part(2 ** 31 - 1, bytes(range(8)), 9999)
    full = parts.PartsManifest({s: big for s in ("log", "index", "timeindex", "txnindex", "snapshot",
                                                 "leader-epoch-checkpoint")})
    raw = full.encode()
    assert len(raw) <= parts.MAX_BYTES and parts.PartsManifest.decode(raw) == full
    plain = parts.PartsManifest({"log": parts.Part.of(10, "0123456789abcdef0123456789abcdef-3"),
                                 "index": parts.Part.of(0, "d41d8cd98f00b204e9800998ecf8427e"),
                                 "timeindex": parts.Part.of(12, "not-an-md5"), "snapshot": parts.Part(5),
                                 "leader-epoch-checkpoint": parts.Part(4)})
    assert parts.PartsManifest.decode(plain.encode()) == plain and not plain.has("txnindex")
    assert plain.parts["log"].etag_matches('"0123456789abcdef0123456789abcdef-3"')
    assert not plain.parts["log"].etag_matches("0123456789abcdef0123456789abcdef-4")
    assert not plain.parts["index"].etag_matches("e41d8cd98f00b204e9800998ecf8427e")
    assert plain.parts["timeindex"].etag_matches("anything")        # no MD5 recorded: size only
    for damaged in (raw[:-1], raw + b"\0", raw[:3] + b"\x09" + raw[4:], b"SE\x02" + raw[3:]):
        with pytest.raises(parts.ManifestError):
            parts.PartsManifest.decode(damaged)
    with pytest.raises(parts.ManifestError):        # every part but the .txnindex is required
        parts.PartsManifest({"log": big})

    class Seg:
        custom_metadata: bytes | None = None
    seg = Seg()
    assert parts.of_segment(seg) is None            # copied before manifests
    seg.custom_metadata = b"\x00\x01other plugin"
    assert parts.of_segment(seg) is None            # another plugin's custom metadata
    seg.custom_metadata = raw[:-2]
    with pytest.raises(parts.ManifestError):
        parts.of_segment(seg)
