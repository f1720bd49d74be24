"""Read-only commands write nothing: ``describe``, ``consume``, ``status``, ``verify``, ``dump-log``, every
``--dry-run`` and the Storage console's readers (status, topics, the message browser) leave every file of the log
dirs as it was, byte for byte, inode and mtime included, on a cleanly closed dir and on crashed ones, and still
answer what the files hold.

The proof is a listing (:func:`listing`): every path under each log dir, the dir itself and its engine files
included, with its size, ``mtime_ns``, inode and SHA-256; it is taken before and after each command and must be
equal. Crashed dirs are made by real processes dying by SIGKILL: a writer killed half way through an append
(``append.torn``: half a batch in the ``.log``), and a cleaner killed at steps of its swap (``.cleaned``, ``.swap``
and ``.deleted`` files and a swap record left behind).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

from storage_engine import crashpoints, layout
from storage_engine.config_file import load_config
from storage_engine.errors import StorageError
from storage_engine.inspection import browse, status, topics
from storage_engine.inspection.listing import list_partition_status
from storage_engine.log import intent
from storage_engine.log.manager import LogManager
from storage_engine.log.read_only import ReadOnlyError
from storage_engine.record.records import SimpleRecord
from tests.paths import REPO
from tests.storage_engine.helpers import get_log, present

PROCS = pathlib.Path(__file__).resolve().parent.parent / "procs"
sys.path.insert(0, str(PROCS))
from payloads import digest  # noqa: E402

TIMEOUT_S = 120
PLAIN, KEYED = "plain", "keyed"


def listing(roots: list[str]) -> dict[str, tuple]:
    """Every path under ``roots`` (the roots included): (size, mtime_ns, inode, sha256 of a file's bytes)."""
    out: dict[str, tuple] = {}
    for root in roots:
        for path in [root] + [os.path.join(dp, n) for dp, dns, fns in os.walk(root) for n in dns + fns]:
            st = os.lstat(path)
            sha = None
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    sha = hashlib.sha256(f.read()).hexdigest()
            out[path] = (st.st_size, st.st_mtime_ns, st.st_ino, sha)
    return out


def changed(before: dict, after: dict) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def child_env(**extra: str) -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)


def armed_env(step: str) -> dict:
    """The environment of a child that kills itself by SIGKILL at ``step`` (storage_engine.crashpoints)."""
    return child_env(**{crashpoints.ENV_VAR: step})


class Store:
    def __init__(self, tmp_path: pathlib.Path, delete_delay_ms: int = 0):
        self.dirs = [str(tmp_path / "logs-a"), str(tmp_path / "logs-b")]
        self.cfg = str(tmp_path / "storage.yaml")
        data = {"broker": {"log.dirs": self.dirs, "log.segment.bytes": 4096, "log.index.interval.bytes": 256,
                           "log.segment.delete.delay.ms": delete_delay_ms},
                "topics": {KEYED: {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}}}
        pathlib.Path(self.cfg).write_text(json.dumps(data), encoding="utf-8")
        self.config = load_config(self.cfg)

    def run(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "storage_engine", "--config", self.cfg, *args], cwd=str(REPO),
                              env=env or child_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
        if env is None:
            assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def unchanged_by(self, *args: str) -> subprocess.CompletedProcess:
        """Run a command; assert it changed no file of the log dirs; return its result."""
        before = listing(self.dirs)
        proc = self.run(*args)
        diff = changed(before, listing(self.dirs))
        assert not diff, f"{args} changed {diff}\nstderr: {proc.stderr}"
        return proc

    def each_unchanged(self, commands: list[tuple[str, ...]]) -> list[tuple[int, str, str]]:
        """Run each command in turn in one child process (:data:`DRIVER`: ``main()`` of the command line, one
        interpreter start for all of them), the listing taken before and after each; assert none changed a file.
        Returns (exit code, stdout, stderr) of each."""
        proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(self.dirs),
                               json.dumps([["--config", self.cfg, *c] for c in commands])], cwd=str(REPO),
                              env=child_env(),
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr
        results = json.loads(proc.stdout)
        for command, (rc, out, err, diff) in zip(commands, results):
            assert "Traceback" not in err, err
            assert not diff, f"{command} changed {diff}\nstderr: {err}"
        assert len(results) == len(commands)
        return [(rc, out, err) for rc, out, err, _ in results]


# Runs command lines through storage_engine.cli.main.main, one after the other; prints [[rc, out, err, changed]].
DRIVER = """
import contextlib, io, json, sys
from storage_engine.cli.main import main
from tests.storage_engine.cli.test_read_only_open import changed, listing
dirs, commands = json.loads(sys.argv[1]), json.loads(sys.argv[2])
results = []
for argv in commands:
    before = listing(dirs)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    results.append([rc, out.getvalue(), err.getvalue(), changed(before, listing(dirs))])
print(json.dumps(results))
"""


def fill_keyed(config, appends: int = 300) -> dict[str, str]:
    """250 records of unique keys (so no cleaned segment ends up empty), then records over 200 keys, in small
    segments; the latest value of each key."""
    rng = random.Random(7)
    latest = {}
    with LogManager.open(config) as mgr:
        log = mgr.get_or_create_log(KEYED, 0)
        for i in range(appends):
            recs = [SimpleRecord((f"u{i * 5 + j}" if i < 50 else f"k{rng.randrange(200)}").encode(),
                                 f"v{i}-{j}".encode()) for j in range(5)]
            log.append_records(recs)
            latest.update({present(r.key).decode(): present(r.value).decode() for r in recs})
    return latest


def consumed(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def segment_file(store: Store, topic: str) -> str:
    for d in store.dirs:
        folder = os.path.join(d, f"{topic}-0")
        if os.path.isdir(folder):
            return os.path.join(folder, sorted(n for n in os.listdir(folder) if n.endswith(".log"))[0])
    raise AssertionError(f"no folder of {topic}-0")


def read_only_commands(store: Store, topic: str) -> list[tuple[str, ...]]:
    return [("describe",), ("describe", "--topic", topic), ("consume", "--topic", topic, "--partition", "0"),
            ("consume", "--topic", topic, "--partition", "0", "--isolation-level", "read_committed"),
            ("status",), ("status", "--json"), ("verify",), ("dump-log", "--files", segment_file(store, topic)),
            ("compact", "--dry-run"), ("retention", "--dry-run"),
            ("retention", "--topic", topic, "--partition", "0", "--dry-run"),
            ("expire-producers", "--dry-run"), ("purge-deleted", "--dry-run"), ("log-dirs",)]


def console_reads_unchanged(store: Store, topic: str) -> browse.BrowsePage:
    """The Storage console's readers, in process: the overview, the topic pages, the message browser."""
    before = listing(store.dirs)
    status.overview(store.config)
    list_partition_status(store.config)
    topics.list_topics(store.config)
    topics.topic_detail(store.config, topic)
    page = browse.browse(store.config, topic, 0, limit=500)
    browse.browse(store.config, topic, 0, latest=True, limit=10)
    diff = changed(before, listing(store.dirs))
    assert not diff, f"the console's readers changed {diff}"
    return page


@pytest.mark.e2e
def test_read_only_commands_change_nothing_in_a_cleanly_closed_dir(tmp_path):
    """Every read-only command (the dry runs of remove-folder and log-dirs' plan too). Before the read-only
    open, on the same kind of dir: describe changed 10 files (lock files, the marker, an
    active segment's indexes, the checkpoints), consume 7, the dry runs of compact, retention and
    expire-producers 10 each. The dir holds .deleted files already due (the delay is 0), which any writable open
    removes."""
    store = Store(tmp_path)
    latest = fill_keyed(store.config)
    with LogManager.open(store.config) as mgr:
        log = mgr.get_or_create_log(PLAIN, 0)
        for i in range(60):
            log.append_records([SimpleRecord(None, f"p{i}-{j}".encode() * 20) for j in range(3)])
    assert store.run("compact", "--topic", KEYED).returncode == 0
    os.makedirs(os.path.join(store.dirs[0], "not-a-partition"))     # a foreign folder, for remove-folder
    assert store.each_unchanged([("remove-folder", "--log-dir", store.dirs[0], "--name", "not-a-partition",
                                  "--dry-run")])[0][0] == 0
    assert any(n.endswith(layout.DELETED_SUFFIX) for d in store.dirs if os.path.isdir(os.path.join(d, "keyed-0"))
               for n in os.listdir(os.path.join(d, "keyed-0"))), "the compaction left .deleted files"
    for topic in (KEYED, PLAIN):
        commands = read_only_commands(store, topic)
        for args, (rc, _out, err) in zip(commands, store.each_unchanged(commands)):
            assert rc == 0, (args, err)
    records = consumed(store.unchanged_by("consume", "--topic", KEYED, "--partition", "0"))
    assert {r["key"]: r["value"] for r in records} == latest
    plain = consumed(store.unchanged_by("consume", "--topic", PLAIN, "--partition", "0"))
    assert [r["offset"] for r in plain] == list(range(180))
    described = json.loads(store.unchanged_by("describe").stdout)
    assert described["read_only"] is True
    assert all(d["clean_shutdown"] and not d["recovery_pending"] for d in described["log_dirs"])
    page = console_reads_unchanged(store, PLAIN)
    assert [r["offset"] for r in page["records"]] == list(range(180))


@pytest.mark.e2e
@pytest.mark.kills
def test_writer_killed_mid_append_read_only_commands_change_nothing_and_see_every_acknowledged_record(tmp_path):
    """A writer killed by SIGKILL half way through an append (half a batch in the active .log): each read-only
    command leaves every file as it was, says recovery is pending, and reads every acknowledged record; the next
    writable open recovers to the same log end."""
    store = Store(tmp_path)
    proc = subprocess.run([sys.executable, str(PROCS / "appender.py"), "--config", store.cfg, "--topic", PLAIN,
                           "--tag", "w", "--appends", "60"], env=armed_env("append.torn:25"), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert "CRASHPOINT append.torn" in proc.stderr, proc.stderr
    acks = {int(f[1]): f[2] for f in (line.split() for line in proc.stdout.splitlines()) if f[0] == "ACK"}
    assert len(acks) == 24 * 3
    commands = read_only_commands(store, PLAIN)
    for args, (rc, _out, err) in zip(commands, store.each_unchanged(commands)):
        # verify reports the torn tail as damage (exit 1); every other command succeeds
        assert rc == (1 if args[0] == "verify" else 0), (args, err)
    values = consumed(store.unchanged_by("consume", "--topic", PLAIN, "--partition", "0", "--encoding", "base64"))
    assert {r["offset"]: digest(base64.b64decode(r["value"])) for r in values} == acks
    described = json.loads(store.unchanged_by("describe").stdout)
    (home,) = [d for d in described["log_dirs"] if d["partitions"]]
    assert home["recovery_pending"] is True and home["clean_shutdown"] is False
    assert any("recovery is pending" in m for m in home["load_messages"])
    assert any("do not parse" in m for m in home["load_messages"]), home["load_messages"]
    assert home["partitions"][0]["log_end_offset"] == max(acks) + 1
    overview = json.loads(store.unchanged_by("status", "--json").stdout)
    assert any(d["recovery_pending"] for d in overview["log_dirs"])
    assert "recovery pending" in store.unchanged_by("status").stdout
    page = console_reads_unchanged(store, PLAIN)
    assert [r["offset"] for r in page["records"]] == sorted(acks)
    # The next writable open recovers (truncates the torn tail) and finds the same records.
    with LogManager.open(store.config) as mgr:
        log = mgr.get_log(PLAIN, 0)
        assert log is not None
        assert {r.offset: digest(r.value) for r in log.read_records()} == acks


# Rolled back (the cleaned segment never became .swap), completed from .swap with its indexes still .cleaned, from
# every old segment .deleted, and from the indexes final with the .log still .swap.
# "no-record": the swap record removed as well, as a Kafka broker leaves a .swap: the loader's file rules decide.
SWAP_STEPS = ["swap.intent", "swap.swap-partial", "swap.old-deleted", "swap.index-final", "swap.old-deleted/no-record"]


@pytest.mark.e2e
@pytest.mark.kills
@pytest.mark.parametrize("step", SWAP_STEPS)
def test_cleaner_killed_mid_swap_read_only_commands_change_nothing_and_read_the_resolved_log(tmp_path, step):
    """A cleaner killed at a step of its swap leaves .cleaned/.swap/.deleted files and a swap record. Read-only
    commands rename, remove and resolve nothing, and read the partition as the next writable open will have it:
    the latest value of every key, in offset order, the very records the writable open then reads."""
    store = Store(tmp_path, delete_delay_ms=0)
    latest = fill_keyed(store.config)
    crash_at, _, variant = step.partition("/")
    proc = store.run("compact", "--topic", KEYED, env=armed_env(crash_at))
    assert f"CRASHPOINT {crash_at}" in proc.stderr, proc.stderr
    log_dir = next(d for d in store.dirs if os.path.isdir(os.path.join(d, "keyed-0")))
    folder = os.path.join(log_dir, "keyed-0")
    if variant == "no-record":
        os.remove(intent.path_of(log_dir, "keyed-0"))
        assert any(n.endswith(layout.SWAP_SUFFIX) for n in os.listdir(folder))
    leftovers = [n for n in os.listdir(folder) if n.endswith((layout.SWAP_SUFFIX, layout.CLEANED_SUFFIX,
                                                              layout.DELETED_SUFFIX))]
    assert leftovers, "the killed cleaner left its files"
    commands = read_only_commands(store, KEYED)
    for args, (rc, _out, err) in zip(commands, store.each_unchanged(commands)):
        assert rc == 0 or (args[0] == "verify" and rc == 1), (args, err)
    records = consumed(store.unchanged_by("consume", "--topic", KEYED, "--partition", "0"))
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets))
    assert {r["key"]: r["value"] for r in records if r["key"] in latest and r["value"] == latest[r["key"]]} == latest
    last = {}
    for r in records:
        last[r["key"]] = r["value"]
    assert last == latest, "the newest record of each key is its latest value"
    page = console_reads_unchanged(store, KEYED)
    assert [r["offset"] for r in page["records"]] == offsets[:500]
    described = json.loads(store.unchanged_by("describe").stdout)
    assert any(d["recovery_pending"] for d in described["log_dirs"]), "the cleaner died: recovery is pending"
    # The next writable open resolves the swap and reads exactly what the read-only open read.
    with LogManager.open(store.config) as mgr:
        log = mgr.get_log(KEYED, 0)
        assert log is not None
        assert [(r.offset, present(r.key).decode(), present(r.value).decode()) for r in log.read_records()] == \
            [(r["offset"], r["key"], r["value"]) for r in records]


@pytest.mark.e2e
def test_read_only_open_while_another_process_holds_the_dir_says_in_use_and_refuses_changes(tmp_path):
    """A process holding the dirs open (no marker: it consumed it): a read-only describe reports the dirs in use,
    not crashed, and changes nothing; a read-only manager refuses every change with ReadOnlyError."""
    store = Store(tmp_path)
    fill_keyed(store.config, appends=40)
    holder = subprocess.Popen([sys.executable, str(PROCS / "holder.py"), "--config", store.cfg, "--clean"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env())
    try:
        assert holder.stdout is not None and holder.stderr is not None
        assert holder.stdout.readline().strip() == "READY", holder.stderr.read()
        described = json.loads(store.unchanged_by("describe").stdout)
        home = [d for d in described["log_dirs"] if d["partitions"]]
        assert home and all(d["in_use"] is True and d["recovery_pending"] is False for d in home), home
        before = listing(store.dirs)
        with LogManager.open(store.config, read_only=True) as mgr:
            log = mgr.get_log(KEYED, 0)
            assert log is not None and log.log_end_offset == 200
            for change in (lambda: log.append_records([SimpleRecord(b"k", b"v")]), log.flush, log.roll,
                           lambda: log.delete_records(10), lambda: log.truncate_to(5), mgr.checkpoint,
                           lambda: mgr.get_or_create_log("new-topic", 0), lambda: mgr.delete_log(KEYED, 0)):
                with pytest.raises(ReadOnlyError):
                    change()
            assert isinstance(ReadOnlyError("x"), StorageError)
        assert not changed(before, listing(store.dirs))
    finally:
        holder.communicate("", timeout=TIMEOUT_S)
    assert holder.returncode == 0


@pytest.mark.slow
def test_read_only_log_follows_a_writer_appending_and_rolling_and_reads_only_acknowledged_records(tmp_path):
    """A read-only manager kept open while a writer process appends (and rolls, 4 KiB segments): every refresh
    reads an offset-contiguous prefix of what the writer wrote, each value the one it acknowledged; the reader
    never takes a lock, so the writer is never held up, and the reader creates no file."""
    store = Store(tmp_path)
    writer = subprocess.Popen([sys.executable, str(PROCS / "appender.py"), "--config", store.cfg, "--topic", PLAIN,
                               "--tag", "w", "--appends", "150", "--pause-s", "0.005"], env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stderr is not None
    assert writer.stdout.readline().strip() == "READY", writer.stderr.read()
    seen: dict[int, str] = {}
    reads = 0
    with LogManager.open(store.config, read_only=True) as mgr:
        log = mgr.get_log(PLAIN, 0)
        assert log is not None
        first_generation = log.generation
        while writer.poll() is None or reads == 0:
            got = [(r.offset, digest(r.value)) for r in log.read_records()]
            assert [o for o, _ in got] == list(range(len(got))), "an offset-contiguous prefix"
            for offset, value in got:
                assert seen.setdefault(offset, value) == value, f"offset {offset} changed value"
            reads += 1
        out, err = writer.communicate(timeout=TIMEOUT_S)
        assert writer.returncode == 0, err
        log.refresh()
        final = {r.offset: digest(r.value) for r in log.read_records()}
        assert log.generation > first_generation, "the reader followed the writer's rolls"
    acks = {int(f[1]): f[2] for f in (line.split() for line in out.splitlines()) if f and f[0] == "ACK"}
    assert len(acks) == 150 * 3 and final == acks
    assert all(acks[o] == v for o, v in seen.items())
    assert reads >= 2
    folder = os.path.join(next(d for d in store.dirs if os.path.isdir(os.path.join(d, f"{PLAIN}-0"))), f"{PLAIN}-0")
    assert len([n for n in os.listdir(folder) if n.endswith(".log")]) > 3, "the writer rolled while it was read"


@pytest.mark.unit
def test_read_only_logs_parked_under_the_open_file_bound_read_again_on_use(tmp_path):
    """With room for one log with open files, a read-only manager of two partitions parks one while it uses the
    other; each reads fully when used again, and nothing in the dirs changes."""
    store = Store(tmp_path)
    latest = fill_keyed(store.config, appends=60)
    with LogManager.open(store.config) as mgr:
        plain_log = mgr.get_or_create_log(PLAIN, 0)
        for _ in range(10):
            plain_log.append_records([SimpleRecord(None, b"x" * 100) for _ in range(5)])
    before = listing(store.dirs)
    with LogManager.open(store.config, read_only=True, max_open_logs=1) as mgr:
        for _ in range(2):
            keyed, plain = mgr.get_log(KEYED, 0), mgr.get_log(PLAIN, 0)
            assert keyed is not None
            assert plain is not None
            assert {present(r.key).decode(): present(r.value).decode() for r in keyed.read_records()} == latest
            assert keyed.parked is False
            assert [r.offset for r in plain.read_records()] == list(range(50))
            assert keyed.parked is True, "used last: the other one"
        ends = {(p["topic"], p["log_end_offset"]) for d in mgr.describe()["log_dirs"] for p in d["partitions"]}
        assert ends == {(KEYED, 300), (PLAIN, 50)}
    assert not changed(before, listing(store.dirs))


@pytest.mark.unit
def test_missing_and_damaged_indexes_are_read_around_in_memory(tmp_path):
    """A sealed segment's offset index overwritten with entries going backwards, and the active segment's index
    and time index removed: a read-only open reads every record (scanning those segments from their start), says
    the next writable open rebuilds the active one's, and creates or rewrites no index file."""
    store = Store(tmp_path)
    with LogManager.open(store.config) as mgr:
        log = mgr.get_or_create_log(PLAIN, 0)
        for i in range(40):
            log.append_records([SimpleRecord(None, f"p{i}-{j}".encode() * 30) for j in range(3)])
        folder, bases = log.dir, [s.base_offset for s in log.segments]
    assert len(bases) > 3
    sealed = os.path.join(folder, f"{bases[1]:020d}.index")
    with open(sealed, "r+b") as f:
        f.write(b"\x00\x00\x00\x09\x00\x00\x00\x10" + b"\x00\x00\x00\x01\x00\x00\x00\x20")   # offsets go back
    for suffix in (".index", ".timeindex"):
        os.remove(os.path.join(folder, f"{bases[-1]:020d}{suffix}"))
    before = listing(store.dirs)
    with LogManager.open(store.config, read_only=True) as mgr:
        log = get_log(mgr, PLAIN, 0)
        assert [r.offset for r in log.read_records()] == list(range(120))
        assert [r.offset for r in log.read_records(bases[1] + 2, 3)] == [bases[1] + 2, bases[1] + 3, bases[1] + 4]
        messages = [m for d in mgr.describe()["log_dirs"] for m in d["load_messages"]]
    # The active segment is checked at the open; a sealed one when it is first read (segments open lazily).
    assert [m for m in messages if "index missing or damaged" in m] == [
        f"{PLAIN}-0: {bases[-1]:020d}.log: index missing or damaged: read without it (the next writable open "
        "rebuilds it)"], messages
    assert not changed(before, listing(store.dirs))


@pytest.mark.e2e
def test_a_lost_middle_segment_is_refused_by_a_read_only_consume_which_records_nothing(tmp_path):
    """A sealed segment's .log removed from the middle of a plain topic: the read-only consume stops at the gap
    with exit 1 and the lost offsets named (as a writable open does once it recorded the loss), describe reports
    it, and neither writes the loss record nor changes any other file."""
    store = Store(tmp_path)
    with LogManager.open(store.config) as mgr:
        log = mgr.get_or_create_log(PLAIN, 0)
        for i in range(40):
            log.append_records([SimpleRecord(None, f"p{i}-{j}".encode() * 30) for j in range(3)])
        folder, bases = log.dir, [s.base_offset for s in log.segments]
    os.remove(os.path.join(folder, f"{bases[1]:020d}.log"))
    (rc, out, err), (drc, described, _) = store.each_unchanged([("consume", "--topic", PLAIN, "--partition", "0"),
                                                                 ("describe",)])
    assert rc == 1 and f"offsets [{bases[1]}, {bases[2]}) were lost" in err, err
    assert [json.loads(line)["offset"] for line in out.splitlines()] == list(range(bases[1]))
    assert drc == 0 and f"offsets [{bases[1]}, {bases[2]}) were lost" in described
