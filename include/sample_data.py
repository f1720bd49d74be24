"""Realistic sample logs for the demo, written through the storage engine's API (never file by file).

``python -m include.sample_data [--config CFG] [--seed N] [--now-ms T] [--scale F] [--reset | --skip-existing]``

Three topics, with the timestamps of a week of traffic ending at ``now`` (busier by day than by night), so
retention finds expired segments and compaction finds keys with many versions:

* ``user-emails`` (3 partitions, a compacted changelog): the latest e-mail address per user id. Updates
  follow a Zipf-like law over a few thousand user ids, so a few users have hundreds of versions and most
  have several; about 4% of the updates delete a user (a tombstone: the key with a ``None`` value).
* ``access-log`` (3 partitions, ``delete`` policy, kept three days): HTTP access lines in the combined log
  format; requests of signed-in visitors are keyed by session id, the others have no key.
* ``user-sessions`` (2 partitions, ``compact,delete``): session state per session id, several updates per
  session, some sessions deleted (tombstoned) after they end.

Keyed records go to ``murmur2(key) % partitions`` like Kafka's default partitioner; keyless ones stick to one
partition per batch (Kafka's sticky partitioner). Records are appended in producer-sized batches with the
batch's newest timestamp as the append time, so segments roll by ``segment.bytes`` as they would in a broker.

The same ``--seed``, ``--now-ms`` and ``--scale`` give byte-identical record content. Log dirs that already
hold partitions are refused (exit 1) unless ``--reset`` (delete what the engine wrote there, then generate)
or ``--skip-existing`` (leave them, exit 0) is given.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shutil
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, Sequence

from storage_engine import LogManager, ManualClock, SimpleRecord, StorageConfig, StorageError, layout, load_config
from storage_engine.log.locks import DirLock
from storage_engine.record.partitioner import default_partition, murmur2
from storage_engine.units import human_bytes

__all__ = ["TOPICS", "DEFAULT_SEED", "generate", "existing_partitions", "reset_log_dirs", "murmur2",
           "format_summary", "main"]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SPAN_MS = 7 * DAY_MS          # timestamps cover the week before ``now``
DEFAULT_SEED = 42
# One generated record: (timestamp ms, key, value (None: a tombstone), headers).
Event = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]
LINGER_MS = 120_000           # a producer batch collects records for at most this long (in event time)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    events: int               # records at scale 1.0 (about 6 segments of 256 KiB per partition)
    description: str


TOPICS = (
    TopicSpec("user-emails", 3, 36_000, "latest e-mail per user id (keyed changelog)"),
    TopicSpec("access-log", 3, 20_000, "HTTP access lines, keyless or keyed by session"),
    TopicSpec("user-sessions", 2, 20_000, "session state per session id"),
)


# ---------------------------------------------------------------------------------------------------------
# Kafka's default partitioner

def partition_for_key(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % numPartitions``: Kafka's default partitioner."""
    return default_partition(key, partitions)


# ---------------------------------------------------------------------------------------------------------
# Event streams. Each returns (timestamp, key, value, headers) tuples in timestamp order.

def _iso(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _hourly_weight(hour_start_ms: int) -> float:
    """Traffic by hour: a night trough, a day plateau, weekends at 60%."""
    dt = datetime.fromtimestamp(hour_start_ms / 1000, tz=timezone.utc)
    h = dt.hour + 0.5
    day = max(0.0, math.sin(math.pi * (h - 6.0) / 16.0)) if 6.0 <= h <= 22.0 else 0.0
    weekend = 0.6 if dt.weekday() >= 5 else 1.0
    return (0.15 + day) * weekend


def _timestamps(rng: random.Random, n: int, start_ms: int, end_ms: int) -> list[int]:
    """``n`` sorted timestamps in [start_ms, end_ms) with a day/night rhythm."""
    bins = list(range(start_ms, end_ms, HOUR_MS))
    weights = [_hourly_weight(b) for b in bins]
    picks = rng.choices(range(len(bins)), weights=weights, k=n)
    out = []
    for i in picks:
        lo = bins[i]
        hi = min(lo + HOUR_MS, end_ms)
        out.append(lo + rng.randrange(hi - lo))
    out.sort()
    return out


_FIRST = ("ada", "alan", "barbara", "claude", "donald", "edsger", "frances", "grace", "john", "katherine",
          "leslie", "margaret", "niklaus", "radia", "shafi", "tim", "barbara", "ken", "dennis", "guido")
_LAST = ("lovelace", "turing", "liskov", "shannon", "knuth", "dijkstra", "allen", "hopper", "backus",
         "johnson", "lamport", "hamilton", "wirth", "perlman", "goldwasser", "berners-lee", "thompson",
         "ritchie", "vanrossum", "kay", "hoare", "milner")
_DOMAINS = ("example.com", "example.org", "example.net", "mail.example.com", "corp.example")
_EMAIL_SOURCES = (b"signup-service", b"profile-service", b"profile-service", b"support-tool")


def _user_emails(rng: random.Random, n: int, now_ms: int, users: int = 3000, skew: float = 1.0) -> Iterator[Event]:
    ids = list(range(1, users + 1))
    rng.shuffle(ids)                       # the hottest users are not simply the lowest ids
    cum = list(itertools.accumulate(1.0 / (rank + 1) ** skew for rank in range(users)))
    stamps = _timestamps(rng, n, now_ms - SPAN_MS, now_ms)
    picks = rng.choices(ids, cum_weights=cum, k=n)
    versions: Counter = Counter()
    live: set[int] = set()
    for ts, uid in zip(stamps, picks):
        key = f"user-{uid:05d}".encode()
        if uid in live and rng.random() < 0.04:
            live.discard(uid)
            yield ts, key, None, (("source", b"gdpr-eraser"),)
            continue
        versions[uid] += 1
        live.add(uid)
        first, last = _FIRST[uid % len(_FIRST)], _LAST[(uid * 7) % len(_LAST)]
        style = rng.randrange(3)
        local = (f"{first}.{last}" if style == 0 else f"{first[0]}{last}" if style == 1
                 else f"{first}{rng.randrange(10, 100)}")
        value = {"user_id": uid, "email": f"{local}@{rng.choice(_DOMAINS)}",
                 "verified": rng.random() < 0.8, "version": versions[uid], "updated_at": _iso(ts)}
        yield ts, key, json.dumps(value, separators=(",", ":")).encode(), (("source", rng.choice(_EMAIL_SOURCES)),)


_PATHS = (("GET", "/", 20), ("GET", "/products", 12), ("GET", "/products/{n}", 18), ("GET", "/search?q={w}", 8),
          ("GET", "/static/app.{h}.js", 10), ("GET", "/static/app.{h}.css", 6), ("GET", "/api/v1/users/{u}", 8),
          ("POST", "/api/v1/orders", 4), ("GET", "/api/v1/orders/{n}", 4), ("POST", "/login", 3),
          ("GET", "/cart", 5), ("PUT", "/api/v1/cart/items/{n}", 2))
_STATUSES = ((200, 82), (304, 7), (302, 3), (404, 4), (401, 1), (500, 1), (503, 0.5), (201, 1.5))
_AGENTS = ("Mozilla/5.0 (X11; Linux x86_64; rv:138.0) Gecko/20100101 Firefox/138.0",
           "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/140.0 Safari/537.36",
           "Mozilla/5.0 (iPhone; CPU iPhone OS 18_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
           "curl/8.11.1", "python-requests/2.32.3", "Googlebot/2.1 (+http://www.google.com/bot.html)")
_WORDS = ("lamp", "desk", "chair", "kafka", "airflow", "spark", "notebook", "cable", "monitor", "mug")
_NETS = ("203.0.113", "198.51.100", "192.0.2")     # documentation address ranges


def _access_log(rng: random.Random, n: int, now_ms: int, sessions: int = 2000) -> Iterator[Event]:
    session_ids = [f"sess-{rng.getrandbits(48):012x}" for _ in range(sessions)]
    paths, path_w = [(m, p) for m, p, _ in _PATHS], [w for _, _, w in _PATHS]
    statuses, status_w = [s for s, _ in _STATUSES], [w for _, w in _STATUSES]
    asset = f"{rng.getrandbits(32):08x}"
    for ts in _timestamps(rng, n, now_ms - SPAN_MS, now_ms):
        session = rng.choice(session_ids) if rng.random() < 0.6 else None
        method, path = rng.choices(paths, weights=path_w)[0]
        path = path.format(n=rng.randrange(1, 5000), u=rng.randrange(1, 3001), w=rng.choice(_WORDS), h=asset)
        status = rng.choices(statuses, weights=status_w)[0]
        size = 0 if status in (304, 302) else rng.randrange(200, 60_000)
        user = f"user-{rng.randrange(1, 3001):05d}" if session else "-"
        when = datetime.fromtimestamp(ts / 1000, tz=timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")
        line = (f'{rng.choice(_NETS)}.{rng.randrange(1, 255)} - {user} [{when}] "{method} {path} HTTP/1.1" '
                f'{status} {size} "https://shop.example.com/" "{rng.choice(_AGENTS)}" '
                f'{rng.expovariate(1 / 0.04):.3f}')
        headers = (("trace-id", f"{rng.getrandbits(64):016x}".encode()),)
        yield ts, session.encode() if session else None, line.encode(), headers


def _user_sessions(rng: random.Random, n: int, now_ms: int) -> list[Event]:
    events: list[Event] = []
    starts = _timestamps(rng, max(1, n // 6), now_ms - SPAN_MS, now_ms)
    for start in starts:
        sid = f"sess-{rng.getrandbits(48):012x}"
        key = sid.encode()
        uid = rng.randrange(1, 3001)
        ts, views = start, 0
        updates = rng.randint(2, 10)
        ended = rng.random() < 0.8
        for i in range(updates):
            if i:
                ts += rng.randint(5_000, 600_000)
            views += rng.randint(1, 4) if i else 1
            state = "started" if i == 0 else ("ended" if ended and i == updates - 1 else "active")
            value = {"session_id": sid, "user_id": uid, "state": state, "page_views": views,
                     "started_at": _iso(start), "last_seen": _iso(ts)}
            events.append((ts, key, json.dumps(value, separators=(",", ":")).encode(), ()))
        if ended and rng.random() < 0.3:
            events.append((ts + rng.randint(1_000, 30_000), key, None, (("reason", b"logout"),)))
    events = [e for e in events if e[0] < now_ms]
    events.sort(key=lambda e: e[0])
    return events


_STREAMS: dict[str, Callable[[random.Random, int, int], Iterable[Event]]] = {
    "user-emails": _user_emails, "access-log": _access_log, "user-sessions": _user_sessions}


# ---------------------------------------------------------------------------------------------------------
# Log dirs: what is there, and resetting them

def _is_partition_dir(path: str, name: str) -> bool:
    if not os.path.isdir(path):
        return False
    try:
        layout.parse_partition_dir(name)
    except ValueError:
        return False
    return True


def existing_partitions(config: StorageConfig) -> dict[str, list[str]]:
    """Partition folders already present, per log dir (only dirs that have some)."""
    out = {}
    for d in config.log_dirs:
        if not os.path.isdir(d):
            continue
        names = sorted(n for n in os.listdir(d) if _is_partition_dir(os.path.join(d, n), n))
        if names:
            out[d] = names
    return out


def reset_log_dirs(config: StorageConfig) -> int:
    """Delete what the engine keeps in the configured log dirs: partition folders, the cache of remote segment
    bytes (``remote-log-index-cache``: the objects it caches belong to the logs being deleted) and the files
    :mod:`storage_engine.layout` names (checkpoints, the clean-shutdown marker, ``meta.properties``, the engine's
    lock, state, claim and uncleanable files, and those of earlier versions); anything else is left alone.
    Refuses a dir another process has open. Returns the number of partition folders removed."""
    removed = 0
    for d in config.log_dirs:
        if not os.path.isdir(d):
            continue
        lock = DirLock(d)
        try:
            if not lock.try_exclusive():
                raise StorageError(f"log dir {d} is in use by another process (it holds {lock.path}); "
                                   "stop it before resetting the sample data")
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if _is_partition_dir(path, name):
                    shutil.rmtree(path)
                    removed += 1
                elif name == layout.REMOTE_LOG_INDEX_CACHE_DIR and os.path.isdir(path) \
                        and not os.path.islink(path):
                    shutil.rmtree(path)
                elif os.path.isfile(path) and name != layout.DIR_LOCK_FILE and (
                        layout.is_engine_file(name) or layout.is_legacy_engine_file(name)
                        or name == layout.META_PROPERTIES):
                    os.remove(path)
        finally:
            lock.close()
        try:
            os.remove(os.path.join(d, layout.DIR_LOCK_FILE))
        except FileNotFoundError:
            pass
    return removed


# ---------------------------------------------------------------------------------------------------------
# Generation

class _PartitionStats:
    __slots__ = ("records", "tombstones", "keyless", "keys", "first_ts", "last_ts", "batches")

    def __init__(self) -> None:
        self.records = self.tombstones = self.keyless = self.batches = 0
        self.keys: Counter = Counter()
        self.first_ts: int | None = None
        self.last_ts: int | None = None

    def add(self, rec: SimpleRecord) -> None:
        self.records += 1
        if rec.key is None:
            self.keyless += 1
        else:
            self.keys[rec.key] += 1
        if rec.value is None:
            self.tombstones += 1
        self.first_ts = rec.timestamp if self.first_ts is None else min(self.first_ts, rec.timestamp)
        self.last_ts = rec.timestamp if self.last_ts is None else max(self.last_ts, rec.timestamp)


def _record_bytes(rec: SimpleRecord) -> int:
    size = 24 + (len(rec.key) if rec.key else 0) + (len(rec.value) if rec.value else 0)
    return size + sum(len(k) + len(v or b"") + 4 for k, v in rec.headers)


def _produce(mgr: LogManager, clock: ManualClock, spec: TopicSpec, events: Iterable[Event], rng: random.Random,
             stats: dict) -> None:
    """Append ``events`` to the topic's partitions in producer-like batches."""
    cfg = mgr.config.log_config(spec.name)
    max_batch_bytes = max(256, min(cfg.segment_bytes, cfg.max_message_bytes) // 4)
    logs = [mgr.get_or_create_log(spec.name, p) for p in range(spec.partitions)]
    pending: dict[int, list[SimpleRecord]] = defaultdict(list)
    pending_bytes: dict[int, int] = defaultdict(int)
    targets = {p: rng.randint(5, 60) for p in range(spec.partitions)}
    sticky = rng.randrange(spec.partitions)

    def send(p: int) -> None:
        nonlocal sticky
        batch = pending.pop(p, None)
        pending_bytes.pop(p, None)
        if not batch:
            return
        clock.set(batch[-1].timestamp)  # appended as a producer would have, when its last record was made
        logs[p].append_records(batch)
        st = stats[(spec.name, p)]
        st.batches += 1
        for rec in batch:
            st.add(rec)
        targets[p] = rng.randint(5, 60)
        if p == sticky and spec.partitions > 1:     # the sticky partitioner moves on after each batch
            sticky = rng.choice([q for q in range(spec.partitions) if q != p])

    for ts, key, value, headers in events:
        p = partition_for_key(key, spec.partitions) if key is not None else sticky
        rec = SimpleRecord(key, value, ts, headers)
        size = _record_bytes(rec)
        if pending[p] and (ts - pending[p][0].timestamp > LINGER_MS or pending_bytes[p] + size > max_batch_bytes):
            send(p)
            p = partition_for_key(key, spec.partitions) if key is not None else sticky
        pending[p].append(rec)
        pending_bytes[p] += size
        if len(pending[p]) >= targets[p]:
            send(p)
    for p in sorted(pending):
        send(p)


def generate(config: StorageConfig, *, seed: int = DEFAULT_SEED, now_ms: int | None = None,
             scale: float = 1.0, reset: bool = False, topics: Sequence[TopicSpec] = TOPICS,
             progress: Callable[[str], object] | None = None) -> dict:
    """Write the sample topics into ``config.log_dirs``; returns a JSON-able summary.

    Raises :class:`FileExistsError` when the log dirs already hold partitions and ``reset`` is false.
    ``progress(topic)`` is called before each topic is written.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    present = existing_partitions(config)
    if present:
        if not reset:
            listing = "; ".join(f"{d}: {len(names)} partitions ({', '.join(names[:4])}"
                                f"{', ...' if len(names) > 4 else ''})" for d, names in present.items())
            raise FileExistsError(f"the log dirs already hold data ({listing}). Use --reset to delete it and "
                                  "generate anew, or --skip-existing to keep it")
        reset_log_dirs(config)
    stats: dict[tuple[str, int], _PartitionStats] = defaultdict(_PartitionStats)
    started = time.monotonic()
    clock = ManualClock(now)
    with LogManager.open(config, clock=clock) as mgr:
        for spec in topics:
            if progress:
                progress(spec.name)
            rng = random.Random(f"{seed}/{spec.name}")
            n = max(spec.partitions, round(spec.events * scale))
            events = _STREAMS[spec.name](rng, n, now)
            _produce(mgr, clock, spec, events, random.Random(f"{seed}/{spec.name}/batches"), stats)
        clock.set(now)
        described = {(log.topic, log.partition): log.describe() for log in mgr.logs.values()}
        dirs = {tp: mgr.dir_of(tp) for tp in mgr.logs}
    rows = []
    for spec in topics:
        for p in range(spec.partitions):
            d, st = described[(spec.name, p)], stats[(spec.name, p)]
            rows.append({
                "topic": spec.name, "partition": p, "log_dir": dirs[(spec.name, p)],
                "cleanup_policy": ",".join(config.log_config(spec.name).cleanup_policy),
                "segments": len(d["segments"]), "size_bytes": d["size_bytes"],
                "log_start_offset": d["log_start_offset"], "log_end_offset": d["log_end_offset"],
                "records": st.records, "batches": st.batches, "tombstones": st.tombstones,
                "keyless": st.keyless, "keys": len(st.keys),
                "max_versions_per_key": max(st.keys.values(), default=0),
                "keys_with_several_versions": sum(1 for c in st.keys.values() if c > 1),
                "first_timestamp": st.first_ts, "last_timestamp": st.last_ts,
            })
    return {
        "config": config.source, "log_dirs": list(config.log_dirs), "seed": seed, "now_ms": now,
        "scale": scale, "elapsed_s": round(time.monotonic() - started, 2), "partitions": rows,
        "totals": {k: sum(r[k] for r in rows) for k in ("segments", "size_bytes", "records", "tombstones")},
    }


# ---------------------------------------------------------------------------------------------------------
# Output

def short_time(ts_ms: int | None) -> str:
    if ts_ms is None:
        return "-"
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%m-%d %H:%M")


def display_path(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def table(headers: list[str], rows: list[list], right: set[int] | None = None) -> str:
    """A plain-text table; columns listed in ``right`` are right-aligned."""
    right = right or set()
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if i in right else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_summary(summary: dict) -> str:
    now = datetime.fromtimestamp(summary["now_ms"] / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    rows = []
    for r in summary["partitions"]:
        rows.append([f"{r['topic']}-{r['partition']}", os.path.basename(r["log_dir"]), r["cleanup_policy"],
                     r["records"], r["keys"] or "-", r["max_versions_per_key"] or "-", r["tombstones"],
                     r["segments"], human_bytes(r["size_bytes"]),
                     f"{r['log_start_offset']}..{r['log_end_offset']}",
                     f"{short_time(r['first_timestamp'])} .. {short_time(r['last_timestamp'])}"])
    t = summary["totals"]
    rows.append(["total", "", "", t["records"], "", "", t["tombstones"], t["segments"],
                 human_bytes(t["size_bytes"]), "", ""])
    head = (f"Sample logs: seed {summary['seed']}, scale {summary['scale']}, now {now}, "
            f"written in {summary['elapsed_s']} s to {', '.join(display_path(d) for d in summary['log_dirs'])}")
    return head + "\n" + table(
        ["partition", "dir", "policy", "records", "keys", "top key", "tombstones", "segments", "bytes",
         "offsets", "timestamps (UTC)"], rows, right={3, 4, 5, 6, 7, 8})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m include.sample_data", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="storage config (default: $STORAGE_ENGINE_CONFIG or include/config/storage.yaml)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    p.add_argument("--now-ms", type=int, default=None,
                   help="end of the generated week, epoch ms (default: the wall clock)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the number of records (default 1.0)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--reset", action="store_true", help="delete existing partitions in the log dirs first")
    mode.add_argument("--skip-existing", action="store_true",
                      help="if the log dirs already hold partitions, leave them and exit 0")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    if args.scale <= 0:
        p.error(f"--scale must be > 0, got {args.scale}")
    if args.now_ms is not None and args.now_ms < SPAN_MS:
        p.error(f"--now-ms must be an epoch time in milliseconds, got {args.now_ms}")
    try:
        config = load_config(args.config)
        if args.skip_existing and existing_partitions(config):
            print(f"sample data: the log dirs already hold partitions, keeping them "
                  f"({', '.join(display_path(d) for d in config.log_dirs)})", file=sys.stderr)
            return 0
        progress = None if args.json else (lambda t: print(f"writing {t} ...", file=sys.stderr, flush=True))
        summary = generate(config, seed=args.seed, now_ms=args.now_ms, scale=args.scale, reset=args.reset,
                           progress=progress)
    except FileExistsError as exc:
        print(f"sample data: {exc}", file=sys.stderr)
        return 1
    except StorageError as exc:
        print(f"sample data: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
