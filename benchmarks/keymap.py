"""keymap: building the compaction key map in process vs with Spark ``local[2]``, and what each map costs in RSS.

Setup per key count (not timed): one partition holding one record per key (keys ``user-NNNNNNNNN``, 14 B, in order;
16-byte values; 1000-record batches; 8 MiB segments, grouped by the data source into tasks of equal bytes, up to
512 MiB, an even number so both cores have work), rolled, so the whole log is the dirty section [0, keys).

Measured, interleaved round by round:

* in-process: ``cleaner.build_offset_map`` into an ``InProcessOffsetMap`` whose dedupe buffer holds every key
  (keys / 0.9 load factor x 24 bytes), so there is one pass and no partial round; the log is open, its pages
  in the page cache. Checked: map not full, one entry per key, latest offset = keys - 1.
* Spark: ``spark-submit --master local[2] spark_jobs/build_key_map.py ...`` as a subprocess (the way the
  ``log_compaction`` DAG runs it), wall time from start to exit, so JVM start-up, SparkSession, Python worker
  start-up, the job and shutdown all count. CPU is that of the whole process tree (the JVM, the Python driver
  and workers), polled from ``/proc`` every 0.25 s. Checked: exit 0, the manifest's records and
  distinct keys = keys. The job's own ``elapsed_s`` (from reading the log to the written map, printed in its
  JSON manifest) is a row of its own; it has no CPU figure.

Ratios are Spark's throughput over the in-process one (``0.1x`` = ten times slower). Spark runs fewer rounds
than the in-process build (2 full, 1 with ``--quick`` or ``--large``): one submission takes minutes here.

Memory (one fresh subprocess per map, so the peak is that map's alone): RSS before the map is built (after
imports) and peak RSS after (``VmRSS``, ``VmHWM`` from ``/proc/self/status``; for the in-process map, filled from
the log by ``build_offset_map``, anonymous RSS ``RssAnon``, as the log's mapped file pages are not the map's);
bytes per key = (peak - before)
/ keys, and the same for the RSS still held once it is built. In-process: an ``InProcessOffsetMap`` filled with
the same keys and offsets by ``put`` (the keys as the record decoder hands them out: one ``bytes`` per key).
Spark: ``SortedHashOffsetMap.load`` of the map the last Spark round wrote. Kafka's anchor: 24 bytes per
entry, so the default 128 MiB dedupe buffer holds 128 MiB / 24 x 0.9 = 5,033,164 keys per cleaning pass.

``--large [KEYS]`` (``make bench-large``) runs this section alone at one key count (default 100,000,000), one
round each; the in-process map and each probe are skipped, with a note, when the RSS they would need (peak
bytes per key measured at 10 M keys, plus a margin) exceeds half of ``MemAvailable``.

Also run as ``python -m benchmarks.keymap probe inprocess KEYS CONFIG`` / ``probe sorted KEYS KEYMAP_DIR``: the
memory probes, printing one JSON line (the sorted probe also times ``get_many``).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time

from spark_jobs.build_key_map import SUBMIT_CONF
from storage_engine.clock import ManualClock
from storage_engine.maintenance.cleaner import CleanerStats, build_offset_map
from storage_engine.config import StorageConfig
from storage_engine.config_file import config_from_mapping
from storage_engine.log.log import Log
from storage_engine.log.manager import LogManager
from storage_engine.maintenance.offset_map import BYTES_PER_ENTRY, InProcessOffsetMap, SortedHashOffsetMap
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord

from .harness import (MB, MIB, NOW_MS, REPO, Context, Row, Sample, Section, partition_log, scratch_dir, timed)

NAME = "keymap"
TOPIC = "bench-keymap"
KEYS_FULL = (1_000_000, 10_000_000)
KEYS_QUICK = (100_000,)
LARGE_KEYS_DEFAULT = 100_000_000
VALUE = b"v" * 16
RECORDS_PER_BATCH = 1000
SEGMENT_BYTES = 8 * MIB
LOAD_FACTOR = 0.9
MAX_INPROCESS_ROUNDS = 3
SPARK_ROUNDS_FULL = 2
SPARK_MASTER = "local[2]"
JOB = REPO / "spark_jobs" / "build_key_map.py"
SPARK_TIMEOUT_S = 4 * 3600
# Kafka's SkimpyOffsetMap: 24 bytes per entry, default buffer 128 MiB, load factor 0.9.
KAFKA_BUFFER_BYTES = 128 * MIB
KAFKA_KEYS_PER_PASS = int(KAFKA_BUFFER_BYTES // BYTES_PER_ENTRY * LOAD_FACTOR)
# Peak RSS per key measured at 10 M keys (114 B in-process, 95 B for SortedHashOffsetMap.load) plus ~15%: used
# only to decide whether a --large step fits in half of MemAvailable.
ESTIMATE_INPROCESS_BYTES_PER_KEY = 30     # the key map's buffer: 24 B / 0.9 load factor
ESTIMATE_SORTED_LOAD_BYTES_PER_KEY = 45

INPROCESS_ROW = "in-process build_offset_map"
SPARK_ROW = "spark-submit local[2], wall"
SPARK_JOB_ROW = "spark job's own elapsed_s"
PROBE_KEYS = 1_000_000


def _progress(message: str) -> None:
    print(f"  [{NAME}] {message}", file=sys.stderr, flush=True)


def _key(i: int) -> bytes:
    return b"user-%09d" % i


def _config_mapping(log_dir: str) -> dict:
    return {"broker": {"log.dirs": [log_dir], "log.segment.bytes": SEGMENT_BYTES},
            "topics": {TOPIC: {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}}}


def build_log(work_dir: str, keys: int) -> tuple[str, StorageConfig, int]:
    """Write the log and its YAML config (the Spark job reads the config file). Returns (config path, config,
    log bytes)."""
    import yaml
    log_dir = os.path.join(work_dir, "logs")
    mapping = _config_mapping(log_dir)
    config_path = os.path.join(work_dir, "storage.yaml")
    with open(config_path, "w") as f:
        f.write(yaml.safe_dump(mapping))
    config = config_from_mapping(mapping, source=config_path)
    with LogManager.open(config, clock=ManualClock(NOW_MS)) as mgr:
        log = mgr.get_or_create_log(TOPIC, 0)
        for start in range(0, keys, RECORDS_PER_BATCH):
            records = [SimpleRecord(_key(i), VALUE, NOW_MS) for i in range(start, min(keys, start + RECORDS_PER_BATCH))]
            log.append_batches(build_batch(records))
        log.roll()
        if log.log_end_offset != keys:
            raise RuntimeError(f"the key-map log ends at {log.log_end_offset}, expected {keys}")
        size = log.size_in_bytes()
    return config_path, config, size


def map_memory_bytes(keys: int) -> int:
    """A dedupe buffer that holds ``keys`` entries (one pass)."""
    return math.ceil(keys / LOAD_FACTOR + 1) * BYTES_PER_ENTRY


# -- in process ------------------------------------------------------------------------------------------------

def inprocess_case(log: Log, keys: int) -> Sample:
    offset_map = InProcessOffsetMap(map_memory_bytes(keys), LOAD_FACTOR)
    sample, full = timed(build_offset_map, log, 0, keys, offset_map, CleanerStats())
    if full or offset_map.size != keys or offset_map.latest_offset != keys - 1:
        raise RuntimeError(f"in-process map: full={full}, {offset_map.size} keys (expected {keys}), latest offset "
                           f"{offset_map.latest_offset} (expected {keys - 1})")
    del offset_map
    return sample


# -- Spark -----------------------------------------------------------------------------------------------------

def spark_env() -> dict:
    """The environment the DAG gives spark-submit: the venv's bin first on PATH (its spark-submit), workers on
    this interpreter, loopback only."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("SPARK_HOME", None)
    return env


def spark_command(config_path: str, keys: int, out: str) -> list[str]:
    conf = [arg for key, value in SUBMIT_CONF.items() for arg in ("--conf", f"{key}={value}")]
    return ["spark-submit", "--master", SPARK_MASTER, *conf, str(JOB),
            "--config", config_path, "--topic", TOPIC, "--partition", "0", "--start-offset", "0",
            "--end-offset", str(keys), "--output", out]


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPU_POLL_S = 0.25


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far: utime + stime) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        table[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS)
    return table


def run_tree_timed(cmd: list[str], env: dict, stdout_path: str, stderr_path: str) -> tuple[Sample, int]:
    """Run ``cmd`` to its exit; wall time, and the CPU of its whole process tree: the last CPU figure seen for
    every descendant, polled every ``CPU_POLL_S`` (a process that lives less than that is missed).
    ``RUSAGE_CHILDREN`` counts only descendants their parents reaped, and missed part of Spark's: 36.0 s
    instead of 43.1 s polled, on a 1 M-key job. Returns (sample, exit code)."""
    seen: dict[int, float] = {}
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=err)
        deadline = start + SPARK_TIMEOUT_S
        while proc.poll() is None:
            table = _proc_table()
            tree, frontier = {proc.pid}, [proc.pid]
            children: dict[int, list[int]] = {}
            for pid, (ppid, _cpu) in table.items():
                children.setdefault(ppid, []).append(pid)
            while frontier:
                for child in children.get(frontier.pop(), ()):
                    if child not in tree:
                        tree.add(child)
                        frontier.append(child)
            for pid in tree:
                if pid in table:
                    seen[pid] = max(seen.get(pid, 0.0), table[pid][1])
            if time.perf_counter() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{cmd[0]} still running after {SPARK_TIMEOUT_S} s: killed")
            time.sleep(CPU_POLL_S)
        wall_s = time.perf_counter() - start
    return Sample(wall_s, sum(seen.values())), proc.returncode


def spark_case(config_path: str, keys: int, out: str) -> tuple[Sample, dict]:
    """One spark-submit, timed from start to exit; returns (sample, the job's manifest)."""
    shutil.rmtree(out, ignore_errors=True)
    stdout_path, stderr_path = out + ".stdout", out + ".stderr"
    sample, code = run_tree_timed(spark_command(config_path, keys, out), spark_env(), stdout_path, stderr_path)
    with open(stdout_path) as f:
        stdout = f.read()
    with open(stderr_path) as f:
        stderr = f.read()
    if code != 0:
        raise RuntimeError(f"spark-submit exited {code}: {stderr[-3000:]}")
    manifest = json.loads(stdout.strip().splitlines()[-1])
    if manifest["records"] != keys or manifest["distinct_keys"] != keys or manifest["spark_master"] != SPARK_MASTER:
        raise RuntimeError(f"spark map does not hold {keys} keys from {keys} records on {SPARK_MASTER}: {manifest}")
    return sample, manifest


# -- memory probes (each in a fresh process) -------------------------------------------------------------------

def _status_kib(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, in KiB. Not ``ru_maxrss``: Linux carries the
    parent's peak RSS into a child across fork + exec, so a probe started by a benchmark process that built a
    big map would report the parent's peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def probe(kind: str, keys: int, path: str | None = None) -> dict:
    """Build one map in this (fresh) process; report RSS before, peak and after, in KiB."""
    import numpy  # noqa: F401  - imported before the baseline, as the loader needs them
    import pyarrow.parquet  # noqa: F401

    from storage_engine.maintenance.offset_map import SortedHashOffsetMap
    if path is None:
        raise ValueError(f"probe {kind}: the path of the config (inprocess) or of the map (sorted) is required")
    if kind == "inprocess":
        # Filled from the benchmark's log (path = its config) by build_offset_map, as the cleaner fills it. The
        # log's mapped pages are file pages: anonymous RSS (RssAnon) is what the map itself holds; the map
        # allocates nothing but its buffer, so its peak is what it holds once filled.
        from storage_engine.config_file import load_config
        mgr = LogManager.open(load_config(path), clock=ManualClock(NOW_MS))
        log = partition_log(mgr, TOPIC, 0)
        before = _status_kib("RssAnon")
        start = time.perf_counter()
        offset_map = InProcessOffsetMap(map_memory_bytes(keys), LOAD_FACTOR)
        build_offset_map(log, 0, keys, offset_map, CleanerStats())
        seconds = time.perf_counter() - start
        after = _status_kib("RssAnon")
        if offset_map.size != keys:
            raise RuntimeError(f"in-process map holds {offset_map.size} keys, expected {keys}")
        mgr.close()
        return {"kind": kind, "keys": keys, "rss_before_kib": before, "rss_peak_kib": after, "rss_after_kib": after,
                "seconds": seconds, "buffer_bytes": offset_map.slots * BYTES_PER_ENTRY}
    if kind != "sorted":
        raise ValueError(f"probe kind must be 'inprocess' or 'sorted', got {kind!r}")
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    sorted_map = SortedHashOffsetMap.load(path)
    size = sorted_map.size
    seconds = time.perf_counter() - start
    after = _status_kib("VmRSS")
    peak = _status_kib("VmHWM")
    if size != keys:
        raise RuntimeError(f"{kind} map holds {size} keys, expected {keys}")
    out = {"kind": kind, "keys": keys, "rss_before_kib": before, "rss_peak_kib": peak, "rss_after_kib": after,
           "seconds": seconds}
    out.update(_probe_lookups(sorted_map, keys))
    return out


def _probe_lookups(offset_map: SortedHashOffsetMap, keys: int) -> dict:
    """Lookups per second of ``get_many`` on the loaded map (half the probed keys present, half absent), against
    ``dict.get`` of the same keys in a dict of them (both best of 3)."""
    n = min(keys, PROBE_KEYS)
    step = max(1, keys // n)
    probes = [_key(i) for i in range(0, step * (n // 2), step)] + [b"absent-%09d" % i for i in range(n - n // 2)]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        got = offset_map.get_many(probes)
        best = min(best, time.perf_counter() - t0)
    if got[:n // 2] != list(range(0, step * (n // 2), step)) or any(o != -1 for o in got[n // 2:]):
        raise RuntimeError("get_many answered wrong offsets")
    table = {k: i for i, k in enumerate(probes[:n // 2])}
    dict_best = float("inf")
    for _ in range(3):
        get = table.get
        t0 = time.perf_counter()
        [get(k, -1) for k in probes]
        dict_best = min(dict_best, time.perf_counter() - t0)
    return {"lookups": n, "lookups_per_s": n / best, "dict_lookups_per_s": n / dict_best}


def run_probe(args: list[str]) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.keymap", "probe", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=SPARK_TIMEOUT_S,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)))
    if proc.returncode != 0:
        raise RuntimeError(f"memory probe {args} failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _per_key(result: dict) -> tuple[float, float]:
    keys = result["keys"]
    return ((result["rss_peak_kib"] - result["rss_before_kib"]) * 1024 / keys,
            (result["rss_after_kib"] - result["rss_before_kib"]) * 1024 / keys)


def _mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


# -- the section -----------------------------------------------------------------------------------------------

def _cpu_s(sample: Sample) -> float:
    """The CPU time of a round timed here (only a time another program reports has none)."""
    if sample.cpu_s is None:
        raise ValueError(f"a round timed here has no CPU time: {sample}")
    return sample.cpu_s


def _measure_keys(ctx: Context, keys: int, inprocess_rounds: int, spark_rounds: int, section: Section,
                  results: dict) -> None:
    group = f"{keys:,} keys"
    with scratch_dir(ctx, f"keymap-{keys}") as work_dir:
        _progress(f"{group}: writing the log")
        t0 = time.perf_counter()
        config_path, config, size = build_log(work_dir, keys)
        build_s = time.perf_counter() - t0
        out = os.path.join(work_dir, "keymap")
        half_available = _mem_available_bytes() // 2
        inprocess_fits = keys * ESTIMATE_INPROCESS_BYTES_PER_KEY <= half_available
        inproc, spark, job = [], [], []
        manifests = []
        mgr = LogManager.open(config, clock=ManualClock(NOW_MS))
        try:
            log = partition_log(mgr, TOPIC, 0)
            segments = len(log.segments) - 1
            for i in range(max(inprocess_rounds, spark_rounds)):
                if i < inprocess_rounds and inprocess_fits:
                    _progress(f"{group}: in-process round {i + 1}")
                    inproc.append(inprocess_case(log, keys))
                if i < spark_rounds:
                    _progress(f"{group}: spark-submit round {i + 1}")
                    sample, manifest = spark_case(config_path, keys, out)
                    spark.append(sample)
                    job.append(Sample(manifest["elapsed_s"], None))
                    manifests.append(manifest)
        finally:
            mgr.close()
        probes = {}
        if inprocess_fits:
            _progress(f"{group}: memory probe, in-process map")
            probes["inprocess"] = run_probe(["inprocess", str(keys), config_path])
        if keys * ESTIMATE_SORTED_LOAD_BYTES_PER_KEY <= half_available:
            _progress(f"{group}: memory probe, SortedHashOffsetMap.load")
            probes["sorted"] = run_probe(["sorted", str(keys), out])
    baseline = INPROCESS_ROW if inproc else None
    if inproc:
        section.add(Row(group, INPROCESS_ROW, keys, size, inproc))
    section.add(Row(group, SPARK_ROW, keys, size, spark, baseline=baseline))
    section.add(Row(group, SPARK_JOB_ROW, keys, size, job, baseline=baseline))
    results[keys] = {"inprocess_s": min(s.wall_s for s in inproc) if inproc else None,
                     "inprocess_cpu_s": min(_cpu_s(s) for s in inproc) if inproc else None,
                     "spark_s": min(s.wall_s for s in spark), "spark_cpu_s": min(_cpu_s(s) for s in spark),
                     "job_s": min(s.wall_s for s in job)}
    notes = section.notes
    notes.append(f"{group}: log of {size / MB:,.1f} MB in {segments} segment(s) (read by {manifests[-1].get('groups', '?')} "
                 f"Spark tasks), written in "
                 f"{build_s:.1f} s; Spark wrote {manifests[-1]['distinct_keys']:,} distinct keys; Spark start-up, "
                 f"shutdown and everything outside build() = wall - elapsed_s = "
                 f"{min(s.wall_s for s in spark) - min(s.wall_s for s in job):,.1f} s (best of each)")
    if not inprocess_fits:
        notes.append(f"{group}: in-process map SKIPPED: ~{keys * ESTIMATE_INPROCESS_BYTES_PER_KEY / 2**30:.1f} GiB "
                     f"estimated > half of MemAvailable ({half_available / 2**30:.1f} GiB)")
    for kind, label in (("inprocess", "InProcessOffsetMap"), ("sorted", "SortedHashOffsetMap.load")):
        if kind not in probes:
            if kind == "sorted":
                notes.append(f"{group}: SortedHashOffsetMap.load probe SKIPPED (memory estimate above half of "
                             "MemAvailable)")
            continue
        peak, held = _per_key(probes[kind])
        p = probes[kind]
        section.facts[f"rss_{kind}"] = {"keys": keys, "peak": peak, "held": held}
        if kind == "inprocess":
            section.facts["inprocess_buffer_rss"] = {
                "keys": keys, "buffer_bytes": p["buffer_bytes"],
                "grew_bytes": (p["rss_peak_kib"] - p["rss_before_kib"]) * 1024}
        else:
            section.facts["probe"] = {k: p[k] for k in ("lookups", "lookups_per_s", "dict_lookups_per_s")}
            notes.append(f"{group}: SortedHashOffsetMap.get_many: {p['lookups_per_s']:,.0f} lookups/s over "
                         f"{p['lookups']:,} keys (half absent); dict.get of the same keys: "
                         f"{p['dict_lookups_per_s']:,.0f} lookups/s")
        notes.append(f"{group}: RSS of {label}: {peak:,.1f} B/key at peak, {held:,.1f} B/key held after "
                     f"(before {p['rss_before_kib'] / 1024:,.0f} MiB, peak {p['rss_peak_kib'] / 1024:,.0f} MiB, "
                     f"after {p['rss_after_kib'] / 1024:,.0f} MiB; built in {p['seconds']:.1f} s); Kafka: "
                     f"{BYTES_PER_ENTRY} B/entry")
    passes = math.ceil(keys / KAFKA_KEYS_PER_PASS)
    notes.append(f"{group}: the default 128 MiB dedupe buffer ({KAFKA_KEYS_PER_PASS:,} keys per pass) would "
                 f"need {passes} cleaning pass(es) for these keys")


def _lines(points: list, field_spark: str, field_inproc: str) -> str:
    """Straight lines t = a + b * keys through the two largest sizes, for Spark and in-process; where they
    cross (an extrapolation)."""
    (k1, r1), (k2, r2) = points[-2], points[-1]
    b_in = (r2[field_inproc] - r1[field_inproc]) / (k2 - k1)
    b_sp = (r2[field_spark] - r1[field_spark]) / (k2 - k1)
    a_in, a_sp = r2[field_inproc] - b_in * k2, r2[field_spark] - b_sp * k2
    slopes = f"Spark {b_sp * 1e6:.2f} s per million keys vs in-process {b_in * 1e6:.2f} s"
    if b_sp < b_in:
        return f"{slopes}: the lines cross at ~{(a_sp - a_in) / (b_in - b_sp):,.0f} keys"
    return f"{slopes}: the lines do not cross"


def crossover(results: dict) -> str:
    """Where Spark's total (wall) time beats the in-process build, from the measured points, plus straight-line
    extrapolations through the two largest sizes by wall and by CPU time, labelled as such."""
    points = sorted((k, r) for k, r in results.items() if r["inprocess_s"] is not None)
    if not points:
        return "crossover: not measured (no in-process figure)"
    measured = "; ".join(
        f"{k:,} keys: spark {r['spark_s']:.1f} s (cpu {r['spark_cpu_s']:.1f} s) vs in-process "
        f"{r['inprocess_s']:.2f} s (cpu {r['inprocess_cpu_s']:.2f} s), "
        + (f"{r['spark_s'] / r['inprocess_s']:.1f}x longer" if r["spark_s"] >= r["inprocess_s"] else "spark wins")
        for k, r in points)
    wins = [k for k, r in points if r["spark_s"] < r["inprocess_s"]]
    if wins:
        head = f"crossover: Spark's total time beats in-process from {min(wins):,} keys (measured)"
    else:
        head = "crossover: Spark's total time does not beat in-process at any measured size"
    tail = ""
    if len(points) >= 2:
        tail = (f". Extrapolated through the two largest sizes (noisy on a shared machine): by wall time "
                f"{_lines(points, 'spark_s', 'inprocess_s')}; by CPU time {_lines(points, 'spark_cpu_s', 'inprocess_cpu_s')}"
                f" (local[2] can at best halve Spark's CPU slope in wall time)")
    return f"{head}: {measured}{tail}"


def run(ctx: Context) -> Section:
    large = ctx.large_keys is not None
    key_counts: tuple[int, ...]
    if ctx.large_keys is not None:
        key_counts, inprocess_rounds, spark_rounds = (ctx.large_keys,), 1, 1
    elif ctx.quick:
        key_counts, inprocess_rounds, spark_rounds = KEYS_QUICK, ctx.repeats, 1
    else:
        key_counts = KEYS_FULL
        inprocess_rounds, spark_rounds = min(ctx.repeats, MAX_INPROCESS_ROUNDS), SPARK_ROUNDS_FULL
    section = Section(NAME, "key-map build: in-process build_offset_map vs spark-submit local[2] (wall incl. JVM "
                            "start-up), and RSS per key of each map" + (" [--large]" if large else ""),
                      {"keys": list(key_counts), "records_per_key": 1, "key_bytes": len(_key(0)),
                       "value_bytes": len(VALUE), "records_per_batch": RECORDS_PER_BATCH,
                       "segment_bytes": SEGMENT_BYTES, "spark_master": SPARK_MASTER,
                       "rounds": f"in-process {inprocess_rounds}, spark {spark_rounds}"})
    results: dict = {}
    for keys in key_counts:
        _measure_keys(ctx, keys, inprocess_rounds, spark_rounds, section, results)
    section.notes.append(crossover(results))
    section.notes.append(f"Kafka anchor: {BYTES_PER_ENTRY} B per map entry (16-byte MD5 + 8-byte offset); the "
                         f"default 128 MiB buffer holds {KAFKA_KEYS_PER_PASS:,} keys per pass")
    section.notes.append("spark rows: CPU = utime + stime of every process in the spark-submit tree (JVM, Python "
                         f"driver and workers), polled every {CPU_POLL_S} s; the elapsed_s row is the job's own clock "
                         "and has no CPU figure")
    return section


def _main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "probe":
        kind, keys = argv[1], int(argv[2])
        print(json.dumps(probe(kind, keys, argv[3] if len(argv) > 3 else None)))
        return 0
    print("usage: python -m benchmarks.keymap probe inprocess KEYS CONFIG | probe sorted KEYS KEYMAP_DIR",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
