"""Root causes of maintenance failures, the fix for each, and the record that alerts each root cause once.

**Classes.** A run's failures (each failed partition of a batch, or a task's own error) are sorted into root
causes by the engine's typed errors and, for I/O errors, by their errno. Each class carries its fix: a sentence,
the commands that resolve it with the topic, partition, file and log dir filled in (``<the workers' python,
full path> -m storage_engine --config <the config the DAGs use> ...``, which works from any shell; see
:func:`engine_command`) and the Storage view page where it shows (and, for an uncleanable
partition, its "Clear" button):

================  ======================================================  ==========================================
kind              from                                                    fix
================  ======================================================  ==========================================
``corrupt``       ``CorruptRecordError``, ``CompressionError``, the       restore the file from a replica or a backup,
                  index, snapshot and checkpoint errors, ``verify``'s     ``verify``; after compaction marked it,
                  damage                                                  ``compact --clear-uncleanable`` (or Clear)
``data-loss``     ``DataLossError``, ``verify``'s lost offsets            restore them from a replica or a backup, or
                                                                          ``accept-loss``
``unreadable``    ``PartitionUnreadableError`` (a partition folder that   put the folder back from a replica or a
                  became a file or vanished, a segment that is no file)   backup, or ``delete-topic --partition``
``disk-full``     ENOSPC, EDQUOT                                          free disk: ``purge-deleted``, ``log-dirs
                                                                          --max-used-percent 85 --execute``
``read-only``     EROFS                                                   remount the file system read-write
``permission``    EACCES, EPERM                                           give the Airflow user access to the path
``in-the-way``    EISDIR, ENOTDIR, ENOTEMPTY, EEXIST (something not the   move it away; ``remove-folder`` for a
                  engine's where it renames or writes)                    folder in a log dir
``disk-error``    EIO, ENXIO, ENODEV                                      check the device; restore from a replica
``open-files``    EMFILE, ENFILE                                          raise the open-file limit
``offline``       ``LogDirOfflineError``                                  bring the log dir back (disk, mount)
``locked``        ``LogLockedError``                                      find the process holding the lock
``config``        ``ConfigError`` (the storage config)                    correct the file, check with ``describe``
``run-conf``      an unknown conf key, a bad param, an unknown topic      trigger again with what the DAG accepts
``spark``         a missing or wrong ``spark_default`` connection         define the connection
``store-*``,      the object store of tiered storage unreachable, its     see :mod:`.remote_causes`
``remote-*``      bucket missing, the credentials refused; a remote
                  object missing or damaged
``task``          anything else                                           the task log
================  ======================================================  ==========================================

**One alert per root cause, across runs and DAGs.** A root cause's key names what is broken, not who met it
(``corrupt:events-0``, ``disk-full:/data/dir-a``, ``config:/etc/storage.yaml``), so a damaged partition that fails
retention, checkpoint and verify alike is one root cause. :class:`AlertRecord` keeps the root causes alerted and
still open in ``alerted-failures.json`` in the maintenance state dir (``$STORAGE_MAINTENANCE_STATE_DIR``, else
``maintenance-state/`` beside the first log dir; when the storage config itself cannot be read,
``$AIRFLOW_HOME/storage-maintenance-state``), read and written under an flock, so runs of several DAGs at once
agree. A digest whose root causes were all alerted is not sent; one with a new cause is sent and lists the old
ones as "still failing". A root cause closes, so that the next failure alerts again, when a task that met it
maintains what it names without error (:func:`note_healthy`: the same partition, the same log dir, any task
reading the same config; a compaction selection that picks the partition again, i.e. its uncleanable mark was
cleared), and an open one is alerted again after :data:`REMIND_AFTER_S`. Root causes of one run's input (an
unknown conf key, an unknown topic) are alerted every time. An alert that could not be delivered is forgotten,
so the next run sends it again. Without a record (the state dir cannot be written) every failure alerts.
"""
from __future__ import annotations

import datetime
import errno as errno_codes
import fcntl
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from . import remote_causes

ALERT_RECORD_FILE = "alerted-failures.json"
FALLBACK_STATE_DIR = "storage-maintenance-state"     # under $AIRFLOW_HOME, when the config cannot be read
REMIND_AFTER_S = 24 * 3600
RECORD_LIMIT_BYTES = 16 * 1024 * 1024
VIEW_PREFIX = "/storage-maintenance"                  # the Storage view's app (storage_view.PREFIX)

CORRUPT_TYPES = frozenset({"CorruptRecordError", "CompressionError", "CorruptIndexError", "CorruptSnapshotError",
                           "CorruptCheckpointError", "InvalidOffsetError", "SegmentOffsetOverflowError",
                           "IndexOffsetOverflowError"})
RUN_INPUT_TYPES = frozenset({"PartitionNotFoundError", "InvalidTopicError", "InvalidRequestError",
                             "ParamValidationError"})
ERRNO_KINDS = {
    errno_codes.ENOSPC: "disk-full", errno_codes.EDQUOT: "disk-full",
    errno_codes.EROFS: "read-only",
    errno_codes.EACCES: "permission", errno_codes.EPERM: "permission",
    errno_codes.EISDIR: "in-the-way", errno_codes.ENOTDIR: "in-the-way", errno_codes.ENOTEMPTY: "in-the-way",
    errno_codes.EEXIST: "in-the-way",
    errno_codes.EIO: "disk-error", errno_codes.ENXIO: "disk-error", errno_codes.ENODEV: "disk-error",
    errno_codes.EMFILE: "open-files", errno_codes.ENFILE: "open-files",
}
# Root causes whose key names one run: never recorded, alerted every time.
RUN_SCOPED = frozenset({"run-conf"})
TITLES = {
    "corrupt": "damaged data", "data-loss": "offsets lost", "unreadable": "partition cannot be read",
    "disk-full": "disk full", "read-only": "read-only file system", "permission": "permission denied",
    "in-the-way": "a path the engine does not own is in the way", "disk-error": "disk I/O error",
    "open-files": "out of file descriptors", "offline": "log dir offline", "locked": "partition locked",
    "config": "invalid storage config", "run-conf": "the run was triggered with input it does not accept",
    "spark": "Spark connection", "task": "task failed", **remote_causes.TITLES,
}

_ERRNO = re.compile(r"\[Errno (\d+)\]")
_LOCATED_FILE = re.compile(r"\(file (.+?)(?:, byte position (\d+))?\)")
_QUOTED = re.compile(r"'(/[^']+)'")
_PATH_BEFORE_ERRNO = re.compile(r"(/[^\s:]+): \[Errno")
_FIRST_PROBLEM = re.compile(r"first: (/[^:]+): ")
_FOLDER_IS_FILE = re.compile(r"(/\S+) is [^,;]+?, not a folder")
_UNREADABLE_PARTITION = re.compile(r"partition (\S+)-(\d+) (?:vanished from|cannot be read in) ")


ENV_ENGINE_COMMAND = "STORAGE_MAINTENANCE_ENGINE_COMMAND"


def engine_command() -> list[str]:
    """How a fix's commands start the engine's CLI: ``$STORAGE_MAINTENANCE_ENGINE_COMMAND`` (split as a shell
    splits it) where the operators' shells reach the engine differently from the workers (another host, a
    container), else ``<the full path of this Python> -m storage_engine``."""
    configured = os.environ.get(ENV_ENGINE_COMMAND, "").strip()
    if configured:
        return shlex.split(configured)
    python = sys.executable or "python3"      # not resolved: a venv's python is a link out of the venv
    return [os.path.abspath(python) if os.sep in python else python, "-m", "storage_engine"]


class Where:
    """What a fix needs to name places: the storage config the DAGs use, its log dirs, the UI's base URL."""

    def __init__(self, config_path: str | None = None, log_dirs: Iterable[str] = (), base_url: str | None = None,
                 store: dict[str, str | None] | None = None):
        self.config_path = config_path
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.base_url = (base_url or "http://localhost:8080").rstrip("/")
        self.store = store or {"endpoint_url": None, "bucket": None}   # the object store of tiered storage

    @classmethod
    def current(cls, hook: Any) -> Where:
        """The config resolved as the tasks resolve it through ``hook`` (a ``StorageEngineHook``; never fails: an
        unreadable config leaves no log dirs)."""
        config_path: str | None = None
        log_dirs: list[str] = []
        store = None
        try:
            config_path = hook.config_path
            log_dirs = list(hook.config.log_dirs)
            store = remote_causes.remote_store(hook.config)
        except Exception:   # noqa: BLE001 - never fails: an unreadable config leaves no log dirs
            pass
        try:
            from airflow.configuration import conf
            base_url = conf.get("api", "base_url", fallback=None)
        except Exception:   # noqa: BLE001 - no Airflow config: no base URL
            base_url = None
        return cls(config_path, log_dirs, base_url, store)

    def cli(self, *args: str) -> str:
        """An engine command that works as printed from any shell and folder: the full path of the Python
        that runs the tasks (the venv's, where the engine is installed), not a bare ``python`` that a shell
        outside the venv does not have, and the config's absolute path."""
        config = ["--config", os.path.abspath(self.config_path)] if self.config_path else []
        return shlex.join([*engine_command(), *config, *args])

    def view(self, path: str = "/") -> str:
        return f"{self.base_url}{VIEW_PREFIX}{path}"

    def partition_page(self, topic: str, partition: int | str) -> str:
        return self.view(f"/partitions/{topic}/{partition}")

    def log_dir_of(self, path: str | None, partition_name: str | None = None) -> str | None:
        """The log dir holding ``path``: one of the config's, else the parent of the partition's folder in it."""
        if not path:
            return None
        path = os.path.abspath(path)
        for d in sorted(self.log_dirs, key=len, reverse=True):
            if path == d or path.startswith(d + os.sep):
                return d
        if partition_name:
            marker = os.sep + partition_name
            at = path.find(marker + os.sep)
            if at < 0 and path.endswith(marker):
                at = len(path) - len(marker)
            if at > 0:
                return path[:at]
        return None


# -- classification ------------------------------------------------------------------------------------------

def _errno_of(text: str) -> int | None:
    m = _ERRNO.search(text)
    return int(m.group(1)) if m else None


def _path_of(text: str) -> str | None:
    """The path an error names: the file of a located error, else the last quoted path (a rename's target is
    what is in the way), else the path before ``[Errno``."""
    m = _LOCATED_FILE.search(text)
    if m:
        return m.group(1)
    quoted = _QUOTED.findall(text)
    if quoted:
        return quoted[-1]
    m = _PATH_BEFORE_ERRNO.search(text)
    return m.group(1) if m else None


def _kind(error_type: str, error: str) -> str:
    remote = remote_causes.remote_kind(error_type)
    if remote is not None:
        return remote
    if error_type == "DataLossError" or (error_type == "DamageFound" and "were lost" in error):
        return "data-loss"
    if error_type in CORRUPT_TYPES or error_type == "DamageFound":
        return "corrupt"
    if error_type == "PartitionUnreadableError":
        return "unreadable"
    if error_type == "LogDirOfflineError":
        return "offline"
    if error_type == "LogLockedError":
        return "locked"
    if error_type == "ConfigError":
        return "config"
    if error_type in RUN_INPUT_TYPES:
        return "run-conf"
    code = _errno_of(error)
    if code in ERRNO_KINDS:
        return ERRNO_KINDS[code]
    if "No space left on device" in error:
        return "disk-full"
    return "task"


def _split_task_error(error: str) -> tuple[str, str]:
    """``"AirflowFailException: ConfigError: bad"`` -> ``("ConfigError", "bad")``: the innermost type named."""
    error_type, text = "", error or ""
    while True:
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*(?:Error|Exception|Failed|Found)): (.*)", text, re.S)
        if not m:
            return error_type, text
        error_type, text = m.group(1), m.group(2)


def _fix(cause: dict, where: Where, *, detected_by_compaction: bool = False) -> None:
    """Fill in ``fix`` (a sentence), ``commands`` and ``page`` of a classified cause."""
    kind, path, log_dir = cause["kind"], cause.get("path"), cause.get("log_dir")
    tp = cause.get("topic_partition")
    topic, partition = (str(tp[0]), str(tp[1])) if tp else ("", "")
    commands: list[str] = []
    page: str | None = where.partition_page(topic, partition) if tp else where.view("/")
    if kind == "corrupt":
        fix = (f"Restore {path or 'the damaged file'} (or the whole partition folder) from a replica or a backup "
               "while nothing writes to the partition, then check it with verify.")
        if path and path.endswith(".log"):
            commands.append(where.cli("dump-log", "--files", path, "--deep-iteration"))
        commands.append(where.cli("verify"))
        if detected_by_compaction and tp:
            fix += " Compaction skips the partition until its uncleanable mark is cleared (the Clear button on the page)."
            commands.append(where.cli("compact", "--clear-uncleanable", "--topic", topic, "--partition", partition))
    elif kind == "data-loss":
        fix = ("Restore the lost offsets from a replica or a backup; or, if they are gone for good, accept the loss "
               "(the log start offset moves past them and reads succeed again).")
        commands.append(where.cli("verify"))
        if tp:
            commands.append(where.cli("accept-loss", "--topic", topic, "--partition", partition))
    elif kind == "unreadable":
        fix = (f"Put the partition folder{f' {path}' if path else ''} back from a replica or a backup (move away "
               "what stands in its place); if the partition is meant to be gone, delete it so the log dir's "
               "checkpoints forget it.")
        if tp:
            commands.append(where.cli("delete-topic", "--topic", topic, "--partition", partition))
        commands.append(where.cli("verify"))
    elif kind == "disk-full":
        place = log_dir or path or "the log dir"
        fix = (f"Free disk space on the file system of {place}: purge deleted files past their delay, move "
               "partitions to a log dir with room, or lower retention.")
        commands += [shlex.join(["df", "-h", place]), where.cli("purge-deleted"),
                     where.cli("log-dirs", "--max-used-percent", "85", "--execute")]
        page = where.view("/")
    elif kind == "read-only":
        place = log_dir or path or "the log dir"
        fix = f"The file system of {place} is read-only: check it (fsck, dmesg) and remount it read-write."
        commands += [shlex.join(["findmnt", "-T", place])]
        page = where.view("/")
    elif kind == "permission":
        fix = f"Give the user Airflow's workers run as read and write access to {path or 'the path named'}."
        if path:
            commands.append(shlex.join(["ls", "-ld", path]))
    elif kind == "in-the-way":
        fix = (f"{path or 'A path'} is not the engine's (a folder or file where it renames or writes): look at it "
               "and move it out of the way; the next run retries.")
        if path:
            commands.append(shlex.join(["ls", "-la", path]))
            parent = os.path.dirname(os.path.abspath(path))
            if parent in where.log_dirs:
                fix = (f"{path} is a folder the engine does not own, in log dir {parent}: remove it (or move it "
                       "elsewhere) if it is no partition of yours.")
                commands.append(where.cli("remove-folder", "--log-dir", parent, "--name", os.path.basename(path),
                                          "--dry-run"))
    elif kind == "disk-error":
        place = log_dir or path or "the log dir"
        fix = (f"The disk of {place} returns I/O errors: check the device (dmesg, smartctl); restore the partitions "
               "from a replica or a backup onto a healthy disk, or move them once the dir can be read.")
        commands += [where.cli("verify"), where.cli("log-dirs")]
        page = where.view("/")
    elif kind == "open-files":
        fix = ("A process ran out of file descriptors: raise the open-file limit of the Airflow workers (ulimit -n, "
               "LimitNOFILE= in their systemd unit) or lower parallelism.")
        commands.append("ulimit -n")
    elif kind == "offline":
        place = log_dir or "the log dir"
        fix = (f"Log dir {place} is offline: bring its disk or mount back (its partitions are skipped until a run "
               "can read it).")
        commands += [shlex.join(["ls", "-ld", place]), where.cli("log-dirs")]
        page = where.view("/")
    elif kind == "locked":
        fix = ("Another process held the partition's lock through every try: find it (a stuck writer or cleaner) "
               "and let it finish or stop it; the next run retries.")
    elif kind == "config":
        config = where.config_path or "the storage config"
        fix = f"Correct {config} (the error names the key, the value and the allowed range), then check it."
        commands.append(where.cli("describe"))
    elif kind == "run-conf":
        fix = ("Trigger the DAG again with only the keys and values it accepts (its trigger form lists them); "
               "nothing was changed by this run.")
        page = f"{where.base_url}/dags/{cause.get('dag_id')}" if cause.get("dag_id") else None
    elif kind in remote_causes.TITLES:
        fix, commands = remote_causes.remote_fix(cause, where.store, where.config_path, where.cli)
        page = where.view("/")
    elif kind == "spark":
        fix = ("Define the spark_default connection (local[*] or spark://host:port); without it spark-submit would "
               "go to YARN.")
        commands.append("airflow connections get spark_default")
        page = f"{where.base_url}/connections"
    else:
        fix = "Read the task log for the error and its traceback."
        page = cause.get("log_url") or page
    if detected_by_compaction and tp and kind != "corrupt" and "marked uncleanable" in (cause.get("error") or ""):
        # whatever marked it, compaction fails on it until the mark is cleared
        fix += " Compaction fails on the partition until its uncleanable mark is cleared (the Clear button on the page)."
        commands.append(where.cli("compact", "--clear-uncleanable", "--topic", topic, "--partition", partition))
    cause.update(fix=fix, commands=commands, page=page)


def classify(error_type: str, error: str, *, topic: str | None = None, partition: int | None = None,
             dag_id: str | None = None, task_id: str | None = None, where: Where | None = None,
             log_url: str | None = None, run_id: str | None = None) -> dict:
    """One failure as a root cause: ``key``, ``kind``, ``title``, ``scope``, the place (``partition``,
    ``log_dir``, ``path``), ``error``, and the fix (``fix``, ``commands``, ``page``)."""
    where = where or Where()
    kind = _kind(error_type, error)
    unreadable = _UNREADABLE_PARTITION.search(error)
    if unreadable and kind in ("task", "unreadable"):
        # verify_log_dirs names a partition its dir's checkpoints list but that cannot be read: the same root
        # cause as the partition's own failure in a batch
        kind = "unreadable"
        if topic is None:
            topic, partition = unreadable.group(1), int(unreadable.group(2))
    if kind == "task" and ("spark_default" in error or "spark-submit would go to YARN" in error
                           or "so spark-submit would" in error):
        kind = "spark"
    if kind == "task" and ("unknown key(s) in the run's conf" in error or error_type == "ParamValidationError"):
        kind = "run-conf"
    name = f"{topic}-{partition}" if topic is not None and partition is not None else None
    path = _path_of(error)
    if kind == "corrupt" and error_type == "DamageFound":
        m = _FIRST_PROBLEM.search(error)
        path = m.group(1) if m else path
    if kind == "unreadable":
        m = _FOLDER_IS_FILE.search(error)
        path = m.group(1) if m else path
    log_dir = where.log_dir_of(path, name)
    if kind == "offline":
        m = re.search(r"log dir (/\S+?) is offline", error) or re.search(r"log dir (/\S+?)[ ,]", error)
        log_dir = m.group(1) if m else log_dir
    key_place: str | None
    scope = "partition" if name else "task"
    if kind in ("disk-full", "read-only", "disk-error", "offline"):
        scope, key_place = "log_dir", log_dir or name or f"{dag_id}.{task_id}"
    elif kind == "open-files":
        scope, key_place = "task", f"{dag_id}.{task_id}"
    elif kind in ("permission", "in-the-way"):
        key_place = path or name or f"{dag_id}.{task_id}"
    elif kind == "config":
        scope, key_place = "config", where.config_path or "?"
    elif kind == "run-conf":
        scope, key_place = "run", f"{dag_id}/{run_id}"
    elif kind in remote_causes.STORE_KINDS:
        # the store, not who met it: every partition and batch of a run with the store down is one cause, which
        # the next task that reaches the store closes
        scope, key_place = "store", remote_causes.store_key(kind, where.store, error)
    elif kind in ("spark", "task"):
        scope = "task" if not name else "partition"
        key_place = f"{dag_id}.{task_id}" + (f":{name}" if name else "") + f":{error_type or 'error'}"
    else:
        key_place = name or path or f"{dag_id}.{task_id}"
    cause: dict[str, Any] = {
        "key": f"{kind}:{key_place}", "kind": kind, "title": TITLES[kind], "scope": scope,
        "partition": None if scope == "store" else name,
        "log_dir": log_dir, "path": path, "config": where.config_path, "error": f"{error_type}: {error}"
        if error_type else error, "detectors": [f"{dag_id}.{task_id}"], "seen_in": [], "dag_id": dag_id,
        "log_url": log_url, "alerted_before": None,
    }
    if name:
        cause["topic_partition"] = (topic, partition)
    _fix(cause, where, detected_by_compaction=dag_id == "log_compaction")
    cause.pop("topic_partition", None)
    return cause


def causes_of_run(alert: dict, where: Where | None = None) -> list[dict]:
    """The root causes of a run digest (``storage_maintenance_run_failed``), in the order first met; a cause met
    by several tasks (retention and producer-id expiry on one partition) is one entry listing where it was seen."""
    where = where or Where()
    out: dict[str, dict] = {}
    dag_id, run_id = alert.get("dag_id"), alert.get("run_id")
    for t in alert.get("failed_tasks") or []:
        seen = t["task_id"] + (f" [{t['label']}]" if t.get("label") else "")
        found = []
        for p in t.get("partitions") or []:
            found.append(classify(p.get("error_type") or "", p.get("error") or "", topic=p.get("topic"),
                                  partition=p.get("partition"), dag_id=dag_id, task_id=t["task_id"], where=where,
                                  log_url=t.get("log_url"), run_id=run_id))
        if not found:
            error_type, text = _split_task_error(t.get("error") or "")
            found.append(classify(error_type, text, dag_id=dag_id, task_id=t["task_id"], where=where,
                                  log_url=t.get("log_url"), run_id=run_id))
        for cause in found:
            merged = out.setdefault(cause["key"], cause)
            if seen not in merged["seen_in"]:
                merged["seen_in"].append(seen)
            for d in cause["detectors"]:
                if d not in merged["detectors"]:
                    merged["detectors"].append(d)
    return list(out.values())


def fix_for_offline_dir(log_dir: str, reason: str, where: Where | None = None) -> dict:
    """The fix of an offline log dir (its error decides: a full disk, a read-only or failing one, a path that
    stopped being the folder)."""
    where = where or Where()
    code = _errno_of(reason or "")
    kind = ERRNO_KINDS.get(code) if code is not None else None
    if kind not in ("disk-full", "read-only", "disk-error", "permission"):
        if code in (errno_codes.ELOOP, errno_codes.ENOENT, errno_codes.ENOTDIR) or "link to nothing" in (reason or ""):
            cause = {"kind": "offline", "log_dir": log_dir, "path": log_dir}
            _fix(cause, where)
            cause["fix"] = (f"{log_dir} is no longer the log dir's folder (a link to nothing, a loop, a file or a "
                            "missing mount): restore the path or the mount; its partitions are skipped until then.")
            return {"kind": "offline", "fix": cause["fix"], "commands": cause["commands"], "page": cause["page"]}
        kind = "offline"
    cause = {"kind": kind, "log_dir": log_dir, "path": log_dir}
    _fix(cause, where)
    return {"kind": kind, "fix": cause["fix"], "commands": cause["commands"], "page": cause["page"]}


# -- the record of alerted root causes -----------------------------------------------------------------------

def _now_iso(now_s: float) -> str:
    return datetime.datetime.fromtimestamp(now_s, tz=datetime.timezone.utc).isoformat(timespec="seconds")


class AlertRecord:
    """``alerted-failures.json``: the root causes alerted and still open (see the module docstring)."""

    def __init__(self, state_dir: str):
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, ALERT_RECORD_FILE)

    @classmethod
    def locations(cls, hook: Any) -> list[AlertRecord]:
        """The record beside the log dirs of ``hook`` (a ``StorageEngineHook``; or under
        ``$STORAGE_MAINTENANCE_STATE_DIR``), then the fallback kept under ``$AIRFLOW_HOME`` for when the config
        cannot be read."""
        out = []
        try:
            out.append(cls(hook.state_dir()))
        except Exception:   # noqa: BLE001 - the config cannot be read: the fallback below
            pass
        home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
        fallback = cls(os.path.join(home, FALLBACK_STATE_DIR))
        if not out or out[0].path != fallback.path:
            out.append(fallback)
        return out

    def _update(self, change: Callable[[dict], tuple[Any, bool]]) -> Any:
        """Run ``change(state) -> (result, changed)`` on the record under its lock; write it back if changed."""
        from storage_engine.durable import atomic_write, read_regular_file
        from storage_engine.errors import UnsafeFileError

        os.makedirs(self.state_dir, exist_ok=True)
        with open(self.path + ".lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                state = json.loads(read_regular_file(self.path, RECORD_LIMIT_BYTES) or b"{}")
            except FileNotFoundError:
                state = {}
            except (ValueError, UnsafeFileError):      # an unreadable record: start over (at worst a cause is
                state = {}                             # alerted again)
            causes = state.setdefault("causes", {})
            result, changed = change(causes)
            if changed:
                atomic_write(self.path, json.dumps(state, indent=1, sort_keys=True).encode())
        return result

    def claim(self, causes: list[dict], seen: dict, now_s: float | None = None) -> tuple[list[dict], list[dict]]:
        """Split ``causes`` into (to alert now, alerted before and still open); record the first ones. A cause
        alerted more than :data:`REMIND_AFTER_S` ago is alerted again (a reminder). Sets ``alerted_before`` on
        every cause that was alerted before, and ``last_alert`` (``at``, ``dag_id``, ``run_id``: the alert that
        makes this one a duplicate) on each one not alerted now."""
        now_s = time.time() if now_s is None else now_s

        def change(record: dict) -> tuple[Any, bool]:
            new, repeated, changed = [], [], False
            for c in causes:
                if c["kind"] in RUN_SCOPED:
                    new.append(c)
                    continue
                entry = record.get(c["key"])
                if entry is not None:
                    c["alerted_before"] = entry.get("first_alerted")
                    detectors = set(entry.get("detectors") or []) | set(c["detectors"])
                    if detectors != set(entry.get("detectors") or []):
                        entry["detectors"], changed = sorted(detectors), True
                    if now_s - float(entry.get("alerted_at_s", 0)) < REMIND_AFTER_S:
                        c["last_alert"] = {"at": _now_iso(float(entry.get("alerted_at_s", 0))),
                                           "dag_id": entry.get("last_dag_id", entry.get("dag_id")),
                                           "run_id": entry.get("last_run_id", entry.get("run_id"))}
                        repeated.append(c)
                        continue
                    entry.update(alerted_at_s=now_s, last_dag_id=seen.get("dag_id"), last_run_id=seen.get("run_id"))
                    changed = True
                    new.append(c)
                    continue
                record[c["key"]] = {"kind": c["kind"], "scope": c["scope"], "partition": c.get("partition"),
                                    "log_dir": c.get("log_dir"), "config": c.get("config"),
                                    "detectors": sorted(c["detectors"]), "first_alerted": _now_iso(now_s),
                                    "alerted_at_s": now_s, "error": c.get("error"), **seen}
                changed = True
                new.append(c)
            return (new, repeated), changed

        return self._update(change)

    def release(self, keys: Iterable[str]) -> None:
        """Forget ``keys`` (their alert was not delivered: the next run alerts them again)."""
        keys = set(keys)

        def change(record: dict) -> tuple[Any, bool]:
            gone = [k for k in keys if k in record]
            for k in gone:
                record.pop(k)
            return None, bool(gone)

        self._update(change)

    def close(self, detector: str, healthy: set[str], *, whole_dag: bool = False, task_ok: bool = True,
              log_dir: str | None = None, config_path: str | None = None) -> list[str]:
        """Close the causes that ``detector`` (``dag_id.task_id``) has now seen fixed (see :func:`note_healthy`);
        returns their keys. Cheap when nothing was ever recorded: the file is not opened."""
        if not os.path.exists(self.path):
            return []
        dag = detector.split(".", 1)[0]

        def change(record: dict) -> tuple[Any, bool]:
            closed = []
            for key, e in record.items():
                detectors = e.get("detectors") or []
                by_task = detector in detectors or (whole_dag and any(d.split(".", 1)[0] == dag for d in detectors))
                scope = e.get("scope")
                if scope == "partition":
                    hit = by_task and e.get("partition") in healthy
                elif scope == "log_dir":
                    hit = by_task and task_ok and (log_dir is None or os.path.abspath(log_dir) == e.get("log_dir"))
                elif scope == "config":
                    hit = config_path is not None and config_path == e.get("config")
                else:
                    hit = task_ok and detector in detectors
                if hit:
                    closed.append(key)
            for key in closed:
                record.pop(key)
            return closed, bool(closed)

        return self._update(change)


def healthy_partitions(result: Any) -> tuple[set[str], bool]:
    """(partitions a task's result shows maintained without error, whether the result is a compaction selection,
    which vouches for the whole DAG: a partition it picks is no longer marked uncleanable)."""
    if not isinstance(result, dict):
        return set(), False
    failed = {f"{f.get('topic')}-{f.get('partition')}" for f in result.get("failures") or []}
    if "selected" in result and "not_dirty" in result:
        names = {f"{s['topic']}-{s['partition']}" for s in (result.get("selected") or []) + (result.get("not_dirty")
                                                                                            or [])}
        return names - failed, True
    if "results" in result:
        names = {f"{r['topic']}-{r['partition']}" for r in result["results"]
                 if isinstance(r, dict) and not r.get("damaged")}
        return names - failed, False
    if "topic" in result and "partition" in result and not failed:
        return {f"{result['topic']}-{result['partition']}"}, False
    return set(), False


def note_healthy(hook: Any, dag_id: str, task_id: str, result: Any, *, log_dir: str | None = None) -> list[str]:
    """A task finished (or a batch finished with some partitions failed): close the root causes it has seen fixed
    in every record; returns the keys closed."""
    healthy, whole_dag = healthy_partitions(result)
    task_ok = not (isinstance(result, dict) and (result.get("failures") or result.get("errors")))
    try:
        config_path = hook.config_path
    except Exception:   # noqa: BLE001 - the config cannot be read: records without a config path
        config_path = None
    closed: list[str] = []
    for record in AlertRecord.locations(hook):
        closed += record.close(f"{dag_id}.{task_id}", healthy, whole_dag=whole_dag, task_ok=task_ok,
                               log_dir=log_dir, config_path=config_path if task_ok else None)
    return closed
