"""The Spark key-map job: real spark-submit (local and a standalone cluster), equivalence with the in-process
map, the data source, and bad input that must fail clearly and leave the log untouched."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Sequence
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from include.broker_launcher import free_ports
from spark_jobs import build_key_map
from spark_jobs.segment_source import NAME, SegmentDataSource, SegmentGroup, SegmentPartition, SegmentReader
from storage_engine.clock import ManualClock
from storage_engine.jobs import compaction
from storage_engine.config_file import config_from_mapping
from storage_engine.inspection.partitions import partition_info
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from tests.spark.conftest import spark_env
from tests.storage_engine.helpers import get_log, manual_clock

pytestmark = pytest.mark.spark
JOB = os.path.abspath(build_key_map.__file__)
T0 = 1_700_000_000_000


def make_config(tmp_path, policy="compact", name="cfg.yaml", topic=None):
    import yaml
    data = {"broker": {"log.dirs": [str(tmp_path / "logs")], "log.segment.bytes": 2048},
            "topics": {"kv": dict({"cleanup.policy": policy, "min.cleanable.dirty.ratio": 0.01}, **(topic or {}))}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path), config_from_mapping(data, source=str(path))


def fill(cfg, records, roll=True):
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("kv", 0)
        for i, (k, v) in enumerate(records):
            manual_clock(log).set(T0 + i)
            log.append_records([SimpleRecord(k, v, T0 + i)])
        if roll:
            manual_clock(log).set(T0 + len(records))
            log.roll()


def digest_dir(path) -> dict:
    out = {}
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def submit(cfg_path, out, master, start, end, topic="kv", partition=0, env=None):
    cmd = ["spark-submit", "--master", master, "--conf", "spark.ui.enabled=false", JOB, "--config", cfg_path,
           "--topic", topic, "--partition", str(partition), "--start-offset", str(start), "--end-offset", str(end),
           "--output", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env or spark_env(), timeout=600)


def test_spark_submit_local_mode_builds_the_map_the_cleaner_uses(tmp_path):
    cfg_path, cfg = make_config(tmp_path)
    records = [(b"k%d" % (i % 50), b"v%d" % i) for i in range(400)]
    fill(cfg, records)
    plan = compaction.compaction_plan(cfg, T0 + 10_000, strategy="spark")
    sel = plan["selected"][0]
    assert sel["map_strategy"] == "spark"
    out = tmp_path / "keymaps" / "kv-0"
    proc = submit(cfg_path, out, "local[2]", sel["first_dirty_offset"], sel["first_uncleanable_offset"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads(proc.stdout.strip().splitlines()[-1])
    assert manifest["spark_master"] == "local[2]"
    assert manifest["distinct_keys"] == 50 and manifest["records"] == 400
    report = compaction.compact_partition(cfg, "kv", 0, sel["first_dirty_offset"], sel["first_uncleanable_offset"],
                                               T0 + 10_000, keymap_path=str(out))
    assert report["map"] == "spark" and report["checkpoint_written"]
    assert report["map_keys"] == 50
    with LogManager.open(cfg, clock=ManualClock(T0 + 10_000)) as mgr:
        got = {r.key: (r.offset, r.value) for r in get_log(mgr, "kv", 0).read_records()}
    assert len(got) == 50
    for i in range(350, 400):
        assert got[b"k%d" % (i % 50)] == (i, b"v%d" % i)


def _wait_port(port, timeout=90) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_spark_submit_to_a_real_standalone_cluster(tmp_path):
    cfg_path, cfg = make_config(tmp_path)
    fill(cfg, [(b"k%d" % (i % 20), b"v%d" % i) for i in range(200)])
    sel = compaction.compaction_plan(cfg, T0 + 10_000, strategy="spark")["selected"][0]
    port, ui, wport, wui = free_ports(4)
    env = spark_env(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "spark-logs"),
                    SPARK_WORKER_DIR=str(tmp_path / "spark-work"))
    master_url = f"spark://127.0.0.1:{port}"
    master = subprocess.Popen(["spark-class", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env,
                              stdout=open(tmp_path / "master.log", "w"), stderr=subprocess.STDOUT)
    worker = None
    try:
        assert _wait_port(port), (tmp_path / "master.log").read_text()[-2000:]
        worker = subprocess.Popen(["spark-class", "org.apache.spark.deploy.worker.Worker", master_url, "--host",
                                   "127.0.0.1", "--port", str(wport), "--webui-port", str(wui), "--cores", "1",
                                   "--memory", "1g"], env=env, stdout=open(tmp_path / "worker.log", "w"),
                                  stderr=subprocess.STDOUT)
        assert _wait_port(wport), (tmp_path / "worker.log").read_text()[-2000:]
        out = tmp_path / "km"
        proc = submit(cfg_path, out, master_url, sel["first_dirty_offset"], sel["first_uncleanable_offset"], env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        manifest = json.loads(proc.stdout.strip().splitlines()[-1])
        # The job really ran on the cluster: the master it reports and an app id issued by that master.
        assert manifest["spark_master"] == master_url
        assert manifest["application_id"].startswith("app-")
        assert manifest["distinct_keys"] == 20
        assert "Registered app" in (tmp_path / "master.log").read_text()
    finally:
        for p in (worker, master):
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()


def _clean_both_ways(tmp_path, spark, records, now_ms, filler=None):
    """Clean two copies of the same log, one with the in-process map, one with a Spark-built map."""
    results = []
    for strategy in ("local", "spark"):
        root = tmp_path / strategy
        root.mkdir()
        _gen_path, gen_cfg = make_config(root, policy="delete", name="gen.yaml")   # accepts keyless records
        (filler or fill)(gen_cfg, records)
        cfg_path, cfg = make_config(root, topic={"delete.retention.ms": 0})
        plan = compaction.compaction_plan(cfg, now_ms, strategy="local")
        if not plan["selected"]:
            results.append(digest_dir(root / "logs"))
            continue
        sel = plan["selected"][0]
        keymap = None
        if strategy == "spark":
            info = partition_info(cfg, "kv", 0)
            keymap = str(root / "km")
            build_key_map.build(spark.sparkContext, info, sel["first_dirty_offset"], sel["first_uncleanable_offset"], keymap)
        compaction.compact_partition(cfg, "kv", 0, sel["first_dirty_offset"], sel["first_uncleanable_offset"],
                                          now_ms, keymap_path=keymap)
        segs = {k: v for k, v in digest_dir(root / "logs" / "kv-0").items() if not k.endswith(".deleted")}
        results.append(segs)
    return results


keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", None])
values = st.one_of(st.none(), st.binary(min_size=0, max_size=30))


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(keys, values), min_size=30, max_size=120))
def test_spark_map_and_in_process_map_clean_identically(tmp_path_factory, spark, records):
    tmp_path = tmp_path_factory.mktemp("same")
    local, remote = _clean_both_ways(tmp_path, spark, records, T0 + 10_000)
    assert local == remote


def fill_transactions(cfg, seed):
    """Three transactional producers committing and aborting at random, an idempotent producer and plain
    records, all over the same few keys (markers' keys look like data keys to a careless map)."""
    import random
    rng = random.Random(seed)
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("kv", 0)
        seq = {1: 0, 2: 0, 3: 0, 4: 0}
        open_txn = {1: False, 2: False, 3: False}
        for i in range(120):
            manual_clock(log).set(T0 + i)
            key = rng.choice([b"a", b"b", b"c", b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"])
            value = None if rng.random() < 0.1 else b"v%d" % i
            who = rng.choice([1, 2, 3, 4, 0])
            if who in open_txn and open_txn[who] and rng.random() < 0.3:
                log.append_end_txn(who, 0, commit=rng.random() < 0.5)
                open_txn[who] = False
                continue
            rec = [SimpleRecord(key, value, T0 + i)]
            if who == 0:
                log.append_records(rec)
            else:
                log.append_records(rec, producer_id=who, producer_epoch=0, base_sequence=seq[who],
                                   is_transactional=who in open_txn)
                seq[who] += 1
                if who in open_txn:
                    open_txn[who] = True
        for who, is_open in open_txn.items():
            if is_open:
                log.append_end_txn(who, 0, commit=who % 2 == 0)
        manual_clock(log).set(T0 + 200)
        log.roll()
        assert log.aborted_transactions(0, log.log_end_offset), "the scenario should abort something"


@pytest.mark.parametrize("seed", [1, 2])
def test_spark_map_and_in_process_map_clean_transactions_identically(tmp_path, spark, seed):
    local, remote = _clean_both_ways(tmp_path, spark, seed, T0 + 10_000, filler=fill_transactions)
    assert local == remote
    assert any(k.endswith(".txnindex") for k in local)


def test_data_source_reads_segments_as_arrow(tmp_path, spark):
    _p, cfg = make_config(tmp_path, policy="delete")
    fill(cfg, [(b"k%d" % (i % 7) if i % 5 else None, None if i % 11 == 0 else b"x" * i) for i in range(300)])
    pdir = str(tmp_path / "logs" / "kv-0")
    spark.dataSource.register(SegmentDataSource)
    df = spark.read.format(NAME).option("path", pdir).option("startOffset", "10").option("endOffset", "250").load()
    rows = df.orderBy("offset").collect()
    assert [r["offset"] for r in rows] == list(range(10, 250))
    assert sum(1 for r in rows if r["key"] is None) == sum(1 for i in range(10, 250) if i % 5 == 0)
    assert sum(1 for r in rows if r["is_tombstone"]) == sum(1 for i in range(10, 250) if i % 11 == 0)
    assert df.rdd.getNumPartitions() == len(SegmentReader({"path": pdir, "startOffset": "10",
                                                           "endOffset": "250"}).partitions())


def test_bad_input_fails_before_spark_and_leaves_the_log_untouched(tmp_path, capsys):
    cfg_path, cfg = make_config(tmp_path)
    fill(cfg, [(b"k%d" % (i % 9), b"v") for i in range(100)])
    before = digest_dir(tmp_path / "logs")
    cases = [
        (["--topic", "missing", "--partition", "0", "--start-offset", "0", "--end-offset", "10"], "does not exist"),
        (["--topic", "kv", "--partition", "0", "--start-offset", "0", "--end-offset", "5000"], "outside the log"),
        (["--topic", "kv", "--partition", "0", "--start-offset", "20", "--end-offset", "10"], "empty"),
        (["--topic", "../etc", "--partition", "0", "--start-offset", "0", "--end-offset", "10"], "illegal"),
    ]
    for args, expected in cases:
        rc = build_key_map.main(["--config", cfg_path, "--output", str(tmp_path / "out")] + args)
        err = capsys.readouterr().err
        assert rc == 2 and expected in err, (args, err)
    rc = build_key_map.main(["--config", cfg_path, "--topic", "kv", "--partition", "0", "--start-offset", "0",
                             "--end-offset", "10", "--output", str(tmp_path / "logs" / "kv-0" / "map")])
    assert rc == 2 and "inside log dir" in capsys.readouterr().err
    assert digest_dir(tmp_path / "logs") == before
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def many_segments(tmp_path_factory):
    """A log of 35 segments of unequal sizes."""
    tmp_path = tmp_path_factory.mktemp("segments")
    _p, cfg = make_config(tmp_path)
    fill(cfg, [(b"k%d" % i, b"v" * (50 + 40 * (i % 3))) for i in range(400)])
    return str(tmp_path / "logs" / "kv-0")


@pytest.mark.parametrize("max_bytes, tasks, expected_groups", [
    (None, None, 2),          # defaults: all under 512 MiB, two tasks at once -> two groups
    (10_000, 2, 8),           # 7 groups would do; rounded up to a multiple of 2
    (10_000, 3, 9),
    (10**12, 1, 1),
    (1, 2, None),             # a group per segment asked for: never more groups than segments
])
def test_key_map_tasks_get_consecutive_segments_of_about_equal_bytes(many_segments, max_bytes, tasks,
                                                                     expected_groups):
    # The key-map job's first stage: one task per group, so equal groups keep both cores busy to the end.
    from spark_jobs.segment_source import SegmentKeysReader
    options = {"path": many_segments}
    if max_bytes is not None:
        options.update(maxPartitionBytes=str(max_bytes), tasks=str(tasks))
    segments = cast(Sequence[SegmentPartition], SegmentReader({"path": many_segments}).partitions())
    groups = cast(Sequence[SegmentGroup], SegmentKeysReader(options).partitions())
    assert [s.path for g in groups for s in g.segments] == [s.path for s in segments]   # all, in log order
    if expected_groups is None:
        assert len(segments) - 3 <= len(groups) <= len(segments)
    else:
        assert len(groups) == expected_groups
    # Each group holds the segments whose middle byte falls in its share: off its share by half a segment at most
    # at either end.
    sizes = [sum(os.path.getsize(s.path) for s in g.segments) for g in groups]
    biggest_segment = max(os.path.getsize(s.path) for s in segments)
    assert max(sizes) - min(sizes) <= 2 * biggest_segment
    assert len(segments) == 35


def test_a_damaged_batch_fails_the_job_naming_partition_file_position_and_offsets(tmp_path):
    # The segment source checks each batch before decoding it: a CRC mismatch inside a sealed segment of the dirty
    # section fails the job (exit 3, one error line), no map is written, and the damage report the Airflow task
    # marks the partition uncleanable with lies beside the output. The log is not touched.
    import struct
    cfg_path, cfg = make_config(tmp_path)
    fill(cfg, [(b"k%d" % (i % 50), b"v%d" % i) for i in range(400)])
    sel = compaction.compaction_plan(cfg, T0 + 10_000, strategy="spark")["selected"][0]
    pdir = tmp_path / "logs" / "kv-0"
    path = str(sorted(pdir.glob("*.log"))[2])
    with open(path, "r+b") as f:
        data = f.read()
        position = 12 + struct.unpack_from(">i", data, 8)[0]          # the second batch
        first = struct.unpack_from(">q", data, position)[0]
        f.seek(position + 64)
        f.write(bytes([data[position + 64] ^ 0x01]))                    # a bit of its record: the CRC tells
    before = digest_dir(pdir)
    out = tmp_path / "keymaps" / "kv-0"
    proc = submit(cfg_path, out, "local[2]", sel["first_dirty_offset"], sel["first_uncleanable_offset"])
    assert proc.returncode == build_key_map.EXIT_DAMAGED == 3, proc.stderr[-3000:]
    # (spark-submit passes the driver's stderr on to its stdout)
    (line,) = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("error: ")]
    for expected in ("key map was not built", "damaged batch in kv-0", path, f"byte position {position}",
                     f"declaring offsets [{first}, {first}]", "crc"):
        assert expected in line, (expected, line)
    assert not out.exists() and not os.path.exists(str(out) + ".tmp")
    with open(build_key_map.damage_report_path(str(out))) as f:
        report = json.load(f)
    assert (report["topic"], report["partition"], report["path"], report["position"]) == ("kv", 0, path, position)
    assert report["error"] in line
    assert digest_dir(pdir) == before


def test_segment_deleted_while_the_job_reads_fails_clearly(tmp_path):
    _p, cfg = make_config(tmp_path)
    fill(cfg, [(b"k%d" % i, b"v" * 50) for i in range(200)])
    pdir = str(tmp_path / "logs" / "kv-0")
    reader = SegmentReader({"path": pdir})
    parts = cast(Sequence[SegmentPartition], reader.partitions())
    assert len(parts) > 2
    os.rename(parts[1].path, parts[1].path + ".deleted")   # as retention or a swap does
    with pytest.raises(FileNotFoundError, match="disappeared|deleted|replaced"):
        list(reader.read(parts[1]))


def test_keys_source_rows_match_the_records_both_implementations(tmp_path, monkeypatch):
    # kafka_segment_keys (what the job reads) against a decode of the same segments: every record in range,
    # its hash, offset and flags; compressed batches and a transaction marker included; compiled and Python.
    from storage_engine.maintenance.offset_map import key_hash
    from storage_engine.record import codecs
    from storage_engine.record.record_batch import build_batch
    from spark_jobs.segment_source import key_batches
    from storage_engine.segment.file_records import FileRecords
    from tests.storage_engine.kernels import use
    _p, cfg = make_config(tmp_path, policy="delete")
    with LogManager.open(cfg, clock=ManualClock(T0)) as mgr:
        log = mgr.get_or_create_log("kv", 0)
        for i in range(60):
            recs = [SimpleRecord(None if j == 1 else b"k%d" % ((i * 3 + j) % 17), None if j == 2 else b"v" * j,
                                 T0 + i) for j in range(4)]
            log.append_batches(build_batch(recs, codec=codecs.LZ4 if i % 3 == 0 else codecs.NONE))
            if i == 30:
                log.append_end_txn(5, 0, commit=True)   # a COMMIT marker (clients may not write control batches)
        log.roll()
        expected = []
        for seg in log.segments:
            for batch in seg.batches(0):
                for rec in batch.records():
                    if 10 <= rec.offset < 200:
                        hi, lo = key_hash(rec.key) if rec.key is not None else (0, 0)
                        expected.append((hi, lo, rec.offset, (4 if batch.is_control else 0) |
                                         (1 if rec.key is None else 0) | (2 if rec.value is None else 0)))
    pdir = tmp_path / "logs" / "kv-0"
    for impl in ("c", "python"):
        use(monkeypatch, impl)
        got: list[tuple] = []
        for name in sorted(os.listdir(pdir)):
            if name.endswith(".log"):
                fr = FileRecords(str(pdir / name), writable=False)
                for b in key_batches(fr.view(), fr.size, 10, 200, name, rows=7):
                    got.extend(zip(*(b.column(i).to_pylist() for i in range(4))))
                fr.close()
        assert got == expected, impl
    assert len(expected) == 190


def test_spark_map_is_written_sorted_in_hash_buckets(tmp_path, spark):
    from storage_engine.maintenance.offset_map import SortedHashOffsetMap, _is_sorted, map_files
    import pyarrow.parquet as pq
    _p, cfg = make_config(tmp_path)
    fill(cfg, [(b"key-%d" % (i % 300), b"v%d" % i) for i in range(900)])
    info = partition_info(cfg, "kv", 0)
    out = str(tmp_path / "km")
    manifest = build_key_map.build(spark.sparkContext, info, 0, 900, out, rows_per_bucket=100)
    assert manifest["sorted"] and manifest["bucket_bits"] == 4 and manifest["distinct_keys"] == 300
    files = map_files(os.path.join(out, "data"))
    assert len({os.path.dirname(f) for f in files}) > 8      # several buckets, read in hash order
    tables = [pq.read_table(f) for f in files]
    hi = [v for t in tables for v in t.column("key_hash_hi").to_pylist()]
    lo = [v for t in tables for v in t.column("key_hash_lo").to_pylist()]
    import numpy as np
    assert _is_sorted(np.array(hi, dtype=np.int64), np.array(lo, dtype=np.int64))
    m = SortedHashOffsetMap.load(out)
    assert all(m.get(b"key-%d" % k) == 600 + k for k in range(300))


rows_strategy = st.lists(st.tuples(st.integers(-3, 3), st.integers(-2, 2), st.integers(0, 10**6)), max_size=300)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows_strategy)
def test_bucket_merge_keeps_each_hash_latest_offset_both_implementations(monkeypatch, triples):
    # What a bucket task does with its rows (compiled radix sort, numpy twin): sorted by (high, low) in signed
    # order, one row per hash holding its maximum offset. Small hash values make many equal high hashes.
    import numpy as np

    from spark_jobs.key_map_tasks import latest_per_key
    from tests.storage_engine.kernels import use
    big = [(h * (1 << 60) + (h & 1), lo * (1 << 61), o) for h, lo, o in triples]   # full 64-bit range too
    for data in (triples, big):
        expected: dict = {}
        for hi, lo, off in data:
            expected[(hi, lo)] = max(off, expected.get((hi, lo), -1))
        want = [(hi, lo, off) for (hi, lo), off in sorted(expected.items())]
        for impl in ("c", "python"):
            use(monkeypatch, impl)
            rows = np.array(data, dtype=np.int64).reshape(-1, 3)
            assert latest_per_key(rows).tolist() == [list(r) for r in want], impl


@pytest.mark.parametrize("spread", [64, 40, 20])
def test_bucket_merge_of_many_rows_matches_numpy(monkeypatch, spread):
    # Enough rows for every path of the compiled sort: scatters at several levels, bins small enough for an
    # insertion sort and bins of one key seen many times (a hot key: 5,000 rows), keys sharing a 64-bit high hash
    # with different low hashes, and high hashes spread over the top `spread` bits only (a bucket's common prefix).
    import numpy as np

    from spark_jobs.key_map_tasks import latest_per_key
    from tests.storage_engine.kernels import use
    rng = np.random.default_rng(spread)
    n = 60_000
    hi = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64) if spread == 64 else \
        rng.integers(0, 1 << spread, n, dtype=np.int64) + (5 << 58)
    lo = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    hi[:20_000] = hi[20_000:40_000]              # a third of the rows repeat a key ...
    lo[:20_000] = lo[20_000:40_000]
    lo[40_000:41_000] = lo[41_000:42_000] + 1    # ... 1,000 share a high hash with another key, not the low one
    hi[40_000:41_000] = hi[41_000:42_000]
    hi[50_000:55_000], lo[50_000:55_000] = hi[7], lo[7]
    off = rng.permutation(n).astype(np.int64)
    data = np.stack([hi, lo, off], axis=1)
    expected = None
    for impl in ("python", "c"):
        use(monkeypatch, impl)
        got = latest_per_key(data.copy())
        if expected is None:
            expected = got
            assert len({(h, lo_) for h, lo_ in zip(hi.tolist(), lo.tolist())}) == len(got)
        assert np.array_equal(got, expected), impl


@pytest.mark.parametrize("bits", [0, 1, 6, 16])
def test_split_by_bucket_both_implementations(monkeypatch, bits):
    # What a segment-group task writes: the rows without dropped flags, grouped by the top bits of the high hash in
    # signed order, log order kept inside each bucket; compiled and numpy alike.
    import numpy as np

    from spark_jobs.key_map_tasks import bucket_of, split_by_bucket
    from spark_jobs.segment_source import CONTROL, KEYLESS, TOMBSTONE, KeyColumns
    from tests.storage_engine.kernels import use
    rng = np.random.default_rng(bits)
    n = 5_000
    cols = KeyColumns(np, n + 7)                     # longer than n: the rows past n must be ignored
    cols.hi[:] = rng.integers(-2**63, 2**63 - 1, n + 7, dtype=np.int64)
    cols.hi[:4] = [-2**63, 2**63 - 1, 0, -1]
    cols.lo[:] = rng.integers(-2**63, 2**63 - 1, n + 7, dtype=np.int64)
    cols.off[:] = np.arange(n + 7) + 10**12
    cols.flags[:] = rng.choice([0, 0, 0, KEYLESS, TOMBSTONE, CONTROL, CONTROL | TOMBSTONE], n + 7)
    cols.n = n
    keep = (cols.flags[:n] & (KEYLESS | CONTROL)) == 0
    results = []
    for impl in ("c", "python"):
        use(monkeypatch, impl)
        rows = np.full((n + 3, 3), -7, dtype=np.int64)
        counts = np.full(1 << bits, -7, dtype=np.int64)
        kept = split_by_bucket(cols, n, KEYLESS | CONTROL, bits, rows, counts)
        assert kept == int(keep.sum()) == counts.sum()
        assert (rows[kept:] == -7).all()
        pos = 0
        for b, k in enumerate(counts.tolist()):
            part = rows[pos:pos + k]
            assert (bucket_of(part[:, 0].copy(), bits) == b).all()
            assert (np.diff(part[:, 2]) > 0).all()        # log order inside a bucket
            pos += k
        results.append((rows[:kept].tolist(), counts.tolist()))
    assert results[0] == results[1]
    assert sorted(r[2] for r in results[0][0]) == (cols.off[:n][keep]).tolist()


def test_loader_reads_row_groups_and_other_integer_columns(tmp_path):
    # SortedHashOffsetMap.load copies row group by row group from the Arrow buffers: many row groups, a file whose
    # offset column is int32 (another writer), an empty file; nulls are refused.
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage_engine.errors import StorageError
    from storage_engine.maintenance.offset_map import SortedHashOffsetMap
    hi = np.arange(-500, 500, dtype=np.int64) * (1 << 50)
    lo = np.arange(1000, dtype=np.int64)
    off = np.arange(1000, dtype=np.int64) * 3
    for n, (a, b) in enumerate([(0, 0), (0, 600), (600, 1000)]):
        (tmp_path / "km" / "data" / f"bucket={n}").mkdir(parents=True)
        table = pa.table({"key_hash_hi": hi[a:b], "key_hash_lo": lo[a:b],
                          "offset": pa.array(off[a:b], pa.int32() if n == 2 else pa.int64())})
        pq.write_table(table, tmp_path / "km" / "data" / f"bucket={n}" / "part.parquet", row_group_size=64)
    (tmp_path / "km" / "keymap.json").write_text(json.dumps({"start_offset": 0, "end_offset": 3000}))
    m = SortedHashOffsetMap.load(str(tmp_path / "km"))
    assert m.size == 1000 and m._hi.tolist() == hi.tolist() and m._lo.tolist() == lo.tolist()
    assert m.offsets().tolist() == off.tolist()
    pq.write_table(pa.table({"key_hash_hi": pa.array([5], pa.int64()), "key_hash_lo": pa.array([1], pa.int64()),
                             "offset": pa.array([None], pa.int64())}),
                   tmp_path / "km" / "data" / "bucket=2" / "part.parquet")
    with pytest.raises(StorageError, match="null"):
        SortedHashOffsetMap.load(str(tmp_path / "km"))
