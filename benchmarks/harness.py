"""What every benchmark shares: the run context, timing, result rows and their table, machine facts, generated
records and scratch directories.

Timing rules (the same for every benchmark):

* a case is a function that sets up, times only its measured region and returns a :class:`Sample` (wall
  seconds from ``time.perf_counter``, CPU seconds of this process from ``time.process_time``), so setup and
  teardown never count;
* the cases of one benchmark run interleaved, ``repeats`` rounds of each, so machine drift hits engine and
  baseline alike; a garbage collection runs before each case, outside the timed region;
* a row reports its best round (like ``timeit``); every round is kept in ``results.json``;
* throughput and ``ratio`` use wall time; the best CPU time (user + system, all threads) and the ratio by
  CPU time are printed beside them, because on a shared machine wall time well above CPU time means the
  run waited (for I/O, or for a core other processes held); targets judge the wall-time figures;
* a ratio is the row's throughput divided by its baseline row's throughput, both from this run;
* MB is 10**6 bytes; MiB (1 << 20) appears only as a size the engine is asked for.

Targets are printed beside the figure they judge ("met" / "NOT MET"); they never fail the run.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, TypeVar

from storage_engine.record.records import SimpleRecord

if TYPE_CHECKING:
    from storage_engine.log.log import Log
    from storage_engine.log.manager import LogManager

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / "var" / "bench"
DEFAULT_RESULTS_PATH = BENCH_DIR / "results.json"
TMP_ROOT = BENCH_DIR / "tmp"

T = TypeVar("T")

MB = 10**6
MIB = 1 << 20
# Record timestamps start here; the engine's clock is pinned just after, so no run reads the wall clock.
BASE_TIMESTAMP_MS = 1_700_000_000_000
NOW_MS = BASE_TIMESTAMP_MS + 3_600_000


@dataclass(frozen=True)
class Context:
    quick: bool
    repeats: int
    tmp_root: Path
    large_keys: int | None = None     # ``--large``: the key count of the large key-map run (keymap only)


# ---------------------------------------------------------------------------------------------------------------
# timing

@dataclass(frozen=True)
class Sample:
    """One timed round. ``cpu_s`` is None when the time comes from another program's own report."""
    wall_s: float
    cpu_s: float | None


def partition_log(mgr: LogManager, topic: str, partition: int) -> Log:
    """The log of ``topic``-``partition`` that the benchmark wrote; a missing one fails the setup, named."""
    log = mgr.get_log(topic, partition)
    if log is None:
        raise RuntimeError(f"partition {topic}-{partition} is not in the log dirs {list(mgr.dirs)}")
    return log


def timed(fn: Callable[..., T], *args: Any) -> tuple[Sample, T]:
    """(time taken, return value) of ``fn(*args)``."""
    cpu_start = time.process_time()
    start = time.perf_counter()
    value = fn(*args)
    wall_s = time.perf_counter() - start
    return Sample(wall_s, time.process_time() - cpu_start), value


def run_interleaved(cases: dict[str, Callable[[], Sample]], repeats: int) -> dict[str, list[Sample]]:
    """Run every case ``repeats`` times, round-robin; returns each case's samples."""
    runs: dict[str, list[Sample]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, case in cases.items():
            gc.collect()
            runs[name].append(case())
    return runs


# ---------------------------------------------------------------------------------------------------------------
# results

@dataclass(frozen=True)
class Target:
    """A throughput goal for one row: ``metric`` ("records_per_s", "mb_per_s", "units_per_s" or "ratio") >=
    ``minimum``."""
    metric: str
    minimum: float
    label: str          # as printed, e.g. ">= 10x kafka-python"

    def judge(self, row: "Row", section: "Section") -> tuple[float | None, bool]:
        value = section.ratio(row) if self.metric == "ratio" else getattr(row, self.metric)
        return value, value is not None and value >= self.minimum


@dataclass
class Row:
    """One measured case: ``records`` and ``bytes`` are the work of one round."""
    group: str
    name: str
    records: int
    bytes: int
    samples: list[Sample]
    baseline: str | None = None        # name of the row in the same group this one is compared with
    target: Target | None = None
    units: int = 0                     # another count of the round's work (e.g. segments), for units_per_s

    @property
    def best_s(self) -> float:
        return min(s.wall_s for s in self.samples)

    @property
    def best_cpu_s(self) -> float | None:
        cpu = [s.cpu_s for s in self.samples if s.cpu_s is not None]
        return min(cpu) if cpu else None

    @property
    def records_per_s(self) -> float:
        return self.records / self.best_s

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.best_s

    @property
    def units_per_s(self) -> float:
        return self.units / self.best_s


@dataclass
class Section:
    name: str
    title: str
    params: dict
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)   # measured values that are not throughput rows (e.g. RSS per key)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def find(self, group: str, name: str) -> Row:
        for row in self.rows:
            if row.group == group and row.name == name:
                return row
        raise KeyError(f"no row {name!r} in group {group!r} of {self.name}")

    def ratio(self, row: Row) -> float | None:
        """Throughput of ``row`` over its baseline's, by wall time (bytes per second: the work is the same
        bytes)."""
        if row.baseline is None:
            return None
        base = self.find(row.group, row.baseline)
        return (row.bytes / row.best_s) / (base.bytes / base.best_s)

    def cpu_ratio(self, row: Row) -> float | None:
        """The same ratio by CPU time: what it would be if neither side ever waited."""
        if row.baseline is None:
            return None
        base = self.find(row.group, row.baseline)
        if row.best_cpu_s is None or base.best_cpu_s is None:
            return None
        return (row.bytes / row.best_cpu_s) / (base.bytes / base.best_cpu_s)

    def to_json(self) -> dict:
        rows = []
        for row in self.rows:
            entry = {"group": row.group, "name": row.name, "records": row.records, "bytes": row.bytes,
                     "runs": [{"wall_s": s.wall_s, "cpu_s": s.cpu_s} for s in row.samples],
                     "best_s": row.best_s, "best_cpu_s": row.best_cpu_s, "records_per_s": row.records_per_s,
                     "mb_per_s": row.mb_per_s, "baseline": row.baseline, "ratio_vs_baseline": self.ratio(row),
                     "cpu_ratio_vs_baseline": self.cpu_ratio(row)}
            if row.target is not None:
                value, met = row.target.judge(row, self)
                entry["target"] = {"metric": row.target.metric, "minimum": row.target.minimum,
                                   "label": row.target.label, "value": value, "met": met}
            rows.append(entry)
        return {"title": self.title, "params": self.params, "rows": rows, "notes": self.notes, "facts": self.facts}


def format_section(section: Section) -> str:
    header = ("case", "measured", "records", "MB", "best s", "cpu s", "records/s", "MB/s", "vs", "ratio",
              "cpu ratio", "target")
    lines = []
    for row in section.rows:
        ratio, cpu_ratio = section.ratio(row), section.cpu_ratio(row)
        target = ""
        if row.target is not None:
            _, met = row.target.judge(row, section)
            target = f"{row.target.label}: {'met' if met else 'NOT MET'}"
        lines.append((row.group, row.name, f"{row.records:,}", f"{row.bytes / MB:,.2f}", f"{row.best_s:.4f}",
                      "-" if row.best_cpu_s is None else f"{row.best_cpu_s:.4f}", f"{row.records_per_s:,.0f}", f"{row.mb_per_s:,.1f}", row.baseline or "-",
                      "-" if ratio is None else f"{ratio:.3f}x", "-" if cpu_ratio is None else f"{cpu_ratio:.3f}x",
                      target))
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    numeric = {2, 3, 4, 5, 6, 7, 9, 10}

    def fmt(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(out).rstrip()

    params = ", ".join(f"{k}={v}" for k, v in section.params.items())
    text = [f"== {section.name}: {section.title}", f"   {params}", fmt(header), fmt(["-" * w for w in widths])]
    text += [fmt(line) for line in lines]
    text += [f"note: {n}" for n in section.notes]
    return "\n".join(text)


def write_results(path: Path, meta: dict, sections: list[Section]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "benchmarks": {s.name: s.to_json() for s in sections}}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------------
# machine and engine facts

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.rstrip("\n") if out.returncode == 0 else None


def implementation() -> dict:
    """Which kernels (compiled or pure Python) the engine runs, as far as it says."""
    import importlib.util

    from storage_engine.record import kernels
    speedups = importlib.util.find_spec("storage_engine.record._speedups") is not None
    declared = getattr(kernels, "IMPLEMENTATION", None)
    if declared is not None:
        summary = str(declared)
    elif speedups:
        summary = "unknown (storage_engine.record._speedups present, kernels.IMPLEMENTATION not defined)"
    else:
        summary = "python (storage_engine.record._speedups absent, kernels.IMPLEMENTATION not defined)"
    return {"kernels.IMPLEMENTATION": declared, "speedups_module_present": speedups, "summary": summary,
            "STORAGE_ENGINE_PURE_PYTHON": os.environ.get("STORAGE_ENGINE_PURE_PYTHON")}


def machine_info() -> dict:
    dirty = _git("status", "--porcelain", "--", "storage_engine")
    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_head": _git("rev-parse", "HEAD"),
        "engine_files_modified": dirty.splitlines() if dirty else [],
        "implementation": implementation(),
        "loadavg_at_start": list(os.getloadavg()),
    }


def format_meta(meta: dict, argv: list[str], quick: bool, repeats: int) -> str:
    impl = meta["implementation"]
    lines = [
        f"date (UTC): {meta['date_utc']}",
        f"machine: nproc={meta['nproc']}, cpu={meta['cpu_model']}, python={meta['python']}, {meta['platform']}",
        f"engine: git {meta['git_head']}"
        + (f", uncommitted changes in {len(meta['engine_files_modified'])} engine file(s)"
           if meta["engine_files_modified"] else ""),
        f"implementation measured: {impl['summary']}"
        + (f" [STORAGE_ENGINE_PURE_PYTHON={impl['STORAGE_ENGINE_PURE_PYTHON']}]"
           if impl["STORAGE_ENGINE_PURE_PYTHON"] is not None else ""),
        f"command: python -m benchmarks {' '.join(argv)}".rstrip(),
        f"load average at start (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in meta['loadavg_at_start'])}",
        f"mode: {'quick' if quick else 'full'}, best of {repeats} interleaved rounds per row unless a section "
        f"says otherwise; MB = 10^6 bytes",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# generated records

_EVENTS = ("page_view", "search", "add_to_cart", "remove_from_cart", "checkout", "login", "logout", "review")
_WORDS = ("shoes", "jacket", "red", "blue", "size", "medium", "large", "small", "price", "discount", "brand",
          "color", "stock", "warehouse", "berlin", "paris", "madrid", "express", "standard", "gift", "wrap",
          "coupon", "newsletter", "mobile", "desktop", "android", "ios", "chrome", "firefox", "campaign",
          "spring", "summer", "sale", "bundle", "returns", "rating", "five", "stars", "category", "outdoor")


def _event_value(rng: random.Random, value_bytes: int, user_id: int, timestamp_ms: int) -> bytes:
    """A JSON-like click-stream event cut to exactly ``value_bytes``: text that compresses like real payloads
    (some unique fields, many repeated words), not random bytes that LZ4 cannot shrink."""
    parts = [f'{{"user_id":{user_id},"event":"{rng.choice(_EVENTS)}","ts":{timestamp_ms},'
             f'"session":"{rng.getrandbits(64):016x}","page":"/{rng.choice(_WORDS)}/{rng.randrange(10000)}",'
             f'"props":{{']
    size = len(parts[0])
    while size < value_bytes:
        part = f'"{rng.choice(_WORDS)}":"{rng.choice(_WORDS)}-{rng.randrange(100)}",'
        parts.append(part)
        size += len(part)
    return "".join(parts).encode()[:value_bytes]


def generate_records(count: int, value_bytes: int, *, seed: int, first_timestamp_ms: int = BASE_TIMESTAMP_MS,
                     keys: int = 1_000_000) -> list[SimpleRecord]:
    """``count`` records: keys like ``user-0042137`` drawn from ``keys`` users, ``value_bytes``-byte event
    values, timestamps one millisecond apart, no headers. Deterministic for a ``seed``."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        user_id = rng.randrange(keys)
        ts = first_timestamp_ms + i
        out.append(SimpleRecord(f"user-{user_id:07d}".encode(), _event_value(rng, value_bytes, user_id, ts), ts))
    return out


def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# ---------------------------------------------------------------------------------------------------------------
# scratch space

@contextlib.contextmanager
def scratch_dir(ctx: Context, prefix: str) -> Iterator[str]:
    """A fresh absolute directory under ``var/bench/tmp``, removed afterwards."""
    ctx.tmp_root.mkdir(parents=True, exist_ok=True)
    path = os.path.abspath(tempfile.mkdtemp(prefix=prefix + "-", dir=ctx.tmp_root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (every thread), from ``/proc`` in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def raw_write(path: str, pieces: list[bytes]) -> Sample:
    """Time ``os.write`` of every piece, in order, to a new file (no fsync); the file is removed after."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        sample, written = timed(_write_all, fd, pieces)
    finally:
        os.close(fd)
        os.remove(path)
    expected = sum(len(p) for p in pieces)
    if written != expected:
        raise RuntimeError(f"raw write baseline wrote {written} bytes, expected {expected}")
    return sample


def _write_all(fd: int, pieces: list[bytes]) -> int:
    written = 0
    write = os.write
    for piece in pieces:
        written += write(fd, piece)
    return written


def raw_read_files(paths: list[str], chunk_bytes: int = MIB) -> int:
    """Read every file start to end with ``os.read`` of ``chunk_bytes``; returns the bytes read."""
    total = 0
    read = os.read
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            while True:
                data = read(fd, chunk_bytes)
                if not data:
                    break
                total += len(data)
        finally:
            os.close(fd)
    return total
