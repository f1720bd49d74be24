"""Names on disk: every file suffix, the segment-name <-> offset helpers, and partition folder names.

Kafka's layout (``LogFileUtils``/``LocalLog``):

* a log dir holds one folder per partition named ``<topic>-<partition>``; a folder pending deletion is
  ``<topic>-<partition>.<32 hex uuid>-delete``, a copy being made for a move between log dirs
  ``<topic>-<partition>.<32 hex uuid>-future``, a replica set aside ``<topic>-<partition>.<32 hex uuid>-stray``
  (``-delete`` and ``-stray`` names cut the topic so the name stays within 255 characters; Kafka does not cut
  ``-future`` names, and a move whose name would be longer is refused);
* segment files are named by their base offset, zero padded to 20 decimal digits: ``<prefix>.log``,
  ``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot``;
* crash-protocol suffixes are appended after the normal one: ``.cleaned`` (being written), ``.swap``
  (ready to replace), ``.deleted`` (scheduled for removal), e.g. ``00000000000000000000.log.swap``;
* log-dir files: the three offset checkpoints, ``replication-offset-checkpoint`` (the high watermarks ``serve``
  writes) and the clean-shutdown marker;
* per-partition files beside the segments: ``leader-epoch-checkpoint`` (kept by
  :mod:`storage_engine.segment.leader_epoch`) and ``partition.metadata`` (Kafka's topic id; the engine reads
  neither it nor writes it, and keeps it where it finds it), each with its transient ``<name>.tmp``.

The engine's own files in a log dir are named here too (see "Engine files" below): Kafka's LogManager loads every
sub-folder of a log dir as a partition and refuses a name that is not ``topic-partition``, but skips files, so the
engine keeps its cross-process state as *files* in the log dir root. Each name holds a ``+``, a character no topic
name can hold, so none can ever be taken for (or collide with) a partition folder: a topic may well be called
``.lock.t``, and its partition 0 lives in ``.lock.t-0``.

Topic names follow Kafka's ``Topic.validate``: 1..249 characters of ``[a-zA-Z0-9._-]``, never ``.`` or ``..``.
So a topic name can never hold a path separator and a partition folder can never escape its log dir.
"""
from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from storage_engine.errors import InvalidTopicError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
SEGMENT_SUFFIXES = (LOG_SUFFIX,) + INDEX_SUFFIXES

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TMP_SUFFIX = ".tmp"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"   # written by serve, as Kafka's ReplicaManager
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
# Per-partition files (inside the partition folder) that are not named by an offset.
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
PARTITION_FILES = frozenset({LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA})

# -- Engine files (the engine's own, in the log dir root) ----------------------------------------------------
DIR_LOCK_FILE = ".lock"  # Kafka's name for the same purpose: every process using the dir holds an flock on it
ENGINE_PREFIX = ".engine+"
PARTITION_STATE_PREFIX = ENGINE_PREFIX + "partition+"  # + <topic>-<partition>: partition flock + shared state
CLEANING_CLAIM_PREFIX = ENGINE_PREFIX + "cleaning+"    # + <topic>-<partition>: flock held while cleaning
INTENT_PREFIX = ENGINE_PREFIX + "intent+"              # + <topic>-<partition>: a multi-step change under way
CREATE_LOCK_FILE = ENGINE_PREFIX + "create.lock"       # serialises partition creation (first log dir)
CHECKPOINT_LOCK_FILE = ENGINE_PREFIX + "checkpoint.lock"
CLEANER_CHECKPOINT_LOCK_FILE = ENGINE_PREFIX + "cleaner-checkpoint.lock"
UNCLEANABLE_FILE = ENGINE_PREFIX + "uncleanable.json"  # partitions the cleaner skips, with the reason
TOPIC_CONFIGS_FILE = ENGINE_PREFIX + "topic-configs.json"  # topic configs set over the wire (first log dir)
ACLS_FILE = ENGINE_PREFIX + "acls.json"                # the authorizer's ACLs (first log dir, storage_engine.acl.store)
ACLS_LOCK_FILE = ENGINE_PREFIX + "acls.lock"           # flock held while the ACLs are rewritten
PRODUCER_IDS_FILE = ENGINE_PREFIX + "producer-ids"      # the next block of producer ids (first log dir)
LOSS_RECORD_PREFIX = ENGINE_PREFIX + "loss+"          # + <topic>-<partition>: offsets lost, until accepted
TOPIC_CHANGES_DIR = ENGINE_PREFIX + "topic-changes"    # topic changes under way (first log dir, log.topic_changes)
SEGMENT_MANIFEST_PREFIX = ENGINE_PREFIX + "segments+"  # + <topic>-<partition>: the segments that must exist
# Run-scoped compaction key maps (Spark-built) go in this folder beside the first log dir, never inside one.
KEYMAP_DIR = "keymaps"
# State the maintenance DAGs keep across runs (offline dirs already alerted) goes here, beside the first log dir.
MAINTENANCE_STATE_DIR = "maintenance-state"
# Names used before the engine's files carried a '+' (converted once when a process opens the dir first).
LEGACY_PARTITION_STATE_PREFIX = ".lock."
LEGACY_CLEANING_CLAIM_PREFIX = ".cleaning."
LEGACY_LOCK_FILES = (".create.lock", ".checkpoint.lock", ".cleaner-checkpoint.lock")
LEGACY_UNCLEANABLE_FILE = ".uncleanable-partitions.json"
NAME_MAX = 255

# Folders LogManager never treats as partitions.
REMOTE_LOG_INDEX_CACHE_DIR = "remote-log-index-cache"   # Kafka's remote index cache; tiered storage's cache
IGNORED_DIRS = frozenset({"__cluster_metadata-0", REMOTE_LOG_INDEX_CACHE_DIR, TOPIC_CHANGES_DIR})
# Files Kafka keeps in a log dir root that this engine does not write (a broker's dir may be opened).
KAFKA_DIR_FILES = frozenset({META_PROPERTIES, "meta.properties.tmp"})

OFFSET_DIGITS = 20
MAX_TOPIC_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_SUFFIXED_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)-(delete|future|stray)$")


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded prefix of a file for ``offset``."""
    return f"{offset:0{OFFSET_DIGITS}d}"


def segment_file(dir_path: str, base_offset: int, suffix: str, extra: str = "") -> str:
    """Path of a segment file: ``<dir>/<20 digits><suffix><extra>`` (extra = ``.cleaned``/``.swap``/``.deleted``).
    ``os.path.join``'s result, without its cost (a load builds several paths per segment)."""
    d = os.fspath(dir_path)
    name = f"{base_offset:0{OFFSET_DIGITS}d}{suffix}{extra}"
    if not d:
        return name
    return d + name if d.endswith("/") else d + "/" + name


def offset_from_filename(name: str) -> int:
    """Kafka's ``offsetFromFileName``: the digits before the first ``.``. Raises ValueError if not a number."""
    name = os.fspath(name)
    head = name[name.rfind("/") + 1:].split(".", 1)[0]   # os.path.basename's, inlined: a load parses every name
    if not head.isdigit():
        raise ValueError(f"not a segment file name: {name!r}")
    return int(head)


def named_offset(name: str) -> int | None:
    """The offset a file name (no directory) starts with, if it starts with 20 digits and a ``.``
    (``offset_from_filename`` of an ``is_offset_named`` name), else None: one call per name of a listing."""
    head = name.split(".", 1)[0]
    return int(head) if len(head) == OFFSET_DIGITS and head.isdigit() else None


def is_offset_named(name: str) -> bool:
    name = os.fspath(name)
    head = name[name.rfind("/") + 1:].split(".", 1)[0]
    return len(head) == OFFSET_DIGITS and head.isdigit()


def is_partition_file(name: str) -> bool:
    """Whether a name in a partition folder is one of Kafka's per-partition files that no offset names
    (``leader-epoch-checkpoint``, ``partition.metadata``) or the temp file of one being replaced."""
    return (name[:-len(TMP_SUFFIX)] if name.endswith(TMP_SUFFIX) else name) in PARTITION_FILES


def validate_topic(topic: object) -> str:
    """Return ``topic`` if Kafka would accept it, else raise :class:`InvalidTopicError` saying why."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic name must be a string, got {type(topic).__name__}")
    if topic == "":
        raise InvalidTopicError("topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name is illegal, it can't be longer than {MAX_TOPIC_LENGTH} characters, "
            f"topic name: {topic[:40]}... ({len(topic)} characters)")
    if not _LEGAL_TOPIC.match(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'")
    return topic


def validate_partition(partition: object) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidTopicError(f"partition must be an integer, got {partition!r}")
    if partition < 0 or partition > 2**31 - 1:
        raise InvalidTopicError(f"partition must be in [0, 2147483647], got {partition}")
    return partition


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>`` after validating both (so the result is a single safe path component)."""
    return f"{validate_topic(topic)}-{validate_partition(partition)}"


def parse_partition_dir(name: str) -> tuple[str, int]:
    """Parse a partition folder name (plain or ``.uuid-delete/-future/-stray``) into (topic, partition).

    Uses the last ``-`` as Kafka does, so topics may contain ``-`` and ``.``. Raises ValueError.
    """
    base = name
    if _SUFFIXED_DIR.match(name):
        base = name[: name.rindex(".")]
    idx = base.rfind("-")
    if idx <= 0 or idx == len(base) - 1:
        raise ValueError(f"{name!r} is not in the form of topic-partition or topic-partition.uniqueId-delete")
    topic, part = base[:idx], base[idx + 1:]
    if not part.isdigit():
        raise ValueError(f"{name!r} is not in the form of topic-partition: partition {part!r} is not a number")
    return topic, int(part)


def dir_suffix(name: str) -> str | None:
    """``"delete"``, ``"future"`` or ``"stray"`` for a name of Kafka's ``<topic>-<partition>.<id>-<suffix>``
    form, None for any other name."""
    m = _SUFFIXED_DIR.match(name)
    return m.group(4) if m else None


def _suffixed_dir_name(topic: str, partition: int, suffix: str, *, cap: bool, unique_id: str | None) -> str:
    """Kafka's ``logDirNameWithSuffixCappedLength``: ``<topic>-<partition>.<32 hex>-<suffix>``; with ``cap`` the
    topic is cut so the whole name has at most 255 characters."""
    partition_dir_name(topic, partition)  # validates both
    uid = unique_id or uuid.uuid4().hex
    tail = f"-{partition}.{uid}-{suffix}"
    keep = min(len(topic), NAME_MAX - len(tail)) if cap else len(topic)
    return topic[:keep] + tail


def delete_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    """A partition folder's name once it is deleted: ``<topic>-<partition>.<32 hex>-delete`` (topic cut so the
    name fits 255 characters, as Kafka's ``logDeleteDirName``)."""
    return _suffixed_dir_name(topic, partition, "delete", cap=True, unique_id=unique_id)


def stray_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    return _suffixed_dir_name(topic, partition, "stray", cap=True, unique_id=unique_id)


def future_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    """The folder a partition is copied into while it moves to another log dir (Kafka's ``logFutureDirName``,
    not cut). Raises :class:`InvalidTopicError` when the name would not fit a file name (255 bytes)."""
    name = _suffixed_dir_name(topic, partition, "future", cap=False, unique_id=unique_id)
    if len(name.encode()) > NAME_MAX:
        raise InvalidTopicError(f"topic name {topic[:40]}... is too long to move partition {partition}: the "
                                f"folder {name[:40]}...-future would have {len(name)} characters (at most "
                                f"{NAME_MAX})")
    return name


@dataclass
class LogDirListing:
    """What a log dir holds, by kind, from names only (no file opened). Every list is sorted by folder name.

    * ``partitions``: ``(folder, (topic, partition))`` of the ``<topic>-<partition>`` folders: the logs;
    * ``futures``: ``(folder, (topic, partition))`` of ``-future`` folders (a move in progress or abandoned);
    * ``deleting``: ``-delete`` folders (removed after ``file.delete.delay.ms``);
    * ``strays``: ``-stray`` folders (kept until an operator removes them);
    * ``foreign``: ``(name, reason)`` of folders that are none of these (never loaded, never deleted);
    * ``foreign_files``: files in the root that neither Kafka nor this engine keeps there."""
    partitions: list = field(default_factory=list)
    futures: list = field(default_factory=list)
    deleting: list = field(default_factory=list)
    strays: list = field(default_factory=list)
    foreign: list = field(default_factory=list)
    foreign_files: list = field(default_factory=list)


def scan_log_dir(log_dir: str) -> LogDirListing:
    """Sort the entries of ``log_dir`` by kind (see :class:`LogDirListing`). A missing log dir is empty; any
    other error listing it is raised (``OSError``)."""
    out = LogDirListing()
    try:
        entries = sorted(os.scandir(log_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return out
    for entry in entries:
        name = entry.name
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if not is_dir:
            if not (is_engine_file(name) or is_legacy_engine_file(name) or name in KAFKA_DIR_FILES):
                out.foreign_files.append(name)
            continue
        if name in IGNORED_DIRS:
            continue
        suffix = dir_suffix(name)
        if suffix == "delete":
            out.deleting.append(name)
            continue
        if suffix == "stray":
            out.strays.append(name)
            continue
        try:
            topic, partition = parse_partition_dir(name)
            validate_topic(topic)
        except ValueError as exc:  # InvalidTopicError is a ValueError too
            out.foreign.append((name, str(exc)))
            continue
        (out.futures if suffix == "future" else out.partitions).append((name, (topic, partition)))
    return out


def partition_dirs(log_dir: str, errors: list | None = None) -> list[tuple[str, tuple[str, int]]]:
    """``[(folder name, (topic, partition))]`` of the partition folders in ``log_dir``, sorted by name.

    Only names are read (no file is opened). Skipped, as Kafka's LogManager skips them: files, the KRaft
    metadata and remote-index folders, folders pending deletion or moving (``-delete``, ``-future``,
    ``-stray``). A folder whose name is not ``<topic>-<partition>`` with a legal topic is skipped and described
    in ``errors``. A missing log dir has no partitions."""
    listing = scan_log_dir(log_dir)
    if errors is not None:
        errors.extend(f"{os.path.join(log_dir, name)}: {reason}" for name, reason in listing.foreign)
    return listing.partitions


# -- engine files ----------------------------------------------------------------------------------------------

def _engine_file(log_dir: str, prefix: str, partition_dir: str) -> str:
    name = prefix + partition_dir
    if len(name.encode()) > NAME_MAX:
        name = prefix + hashlib.sha1(partition_dir.encode()).hexdigest()
    return os.path.join(log_dir, name)


def partition_state_file(log_dir: str, partition_dir: str) -> str:
    """The partition's lock and shared-state file (``.engine+partition+<topic>-<partition>``; the name's SHA-1
    instead when that would exceed 255 bytes)."""
    return _engine_file(log_dir, PARTITION_STATE_PREFIX, partition_dir)


def cleaning_claim_file(log_dir: str, partition_dir: str) -> str:
    """The partition's cleaning claim (``.engine+cleaning+<topic>-<partition>``, SHA-1 likewise)."""
    return _engine_file(log_dir, CLEANING_CLAIM_PREFIX, partition_dir)


def intent_file(log_dir: str, partition_dir: str) -> str:
    """The partition's pending-change record (``.engine+intent+<topic>-<partition>``, SHA-1 likewise): written
    durably before the first rename of a multi-step change, removed when the change is done."""
    return _engine_file(log_dir, INTENT_PREFIX, partition_dir)


def loss_record_file(log_dir: str, partition_dir: str) -> str:
    """The partition's record of offsets it lost (``.engine+loss+<topic>-<partition>``, SHA-1 likewise): written
    when a load finds data gone (a first segment missing, a sealed segment emptied), kept until an operator
    accepts the loss (:mod:`storage_engine.log.losses`)."""
    return _engine_file(log_dir, LOSS_RECORD_PREFIX, partition_dir)


def segment_manifest_file(log_dir: str, partition_dir: str) -> str:
    """The partition's segment manifest (``.engine+segments+<topic>-<partition>``, SHA-1 likewise): the base
    offsets of the segments it must hold, written with every roll, swap, deletion and truncation
    (:mod:`storage_engine.log.manifest`)."""
    return _engine_file(log_dir, SEGMENT_MANIFEST_PREFIX, partition_dir)


def keymap_root(log_dirs: Sequence[str]) -> str:
    """Where run-scoped key maps go by default: ``keymaps/`` beside the first log dir."""
    return os.path.join(os.path.dirname(os.path.abspath(log_dirs[0])), KEYMAP_DIR)


def is_engine_file(name: str) -> bool:
    """Whether a name in a log dir root is a file this engine (or Kafka, for the log dir) keeps: the dir lock,
    the engine's ``.engine+`` files, the clean-shutdown marker, the offset checkpoints and their temp files."""
    if name in (DIR_LOCK_FILE, CLEAN_SHUTDOWN_FILE) or name.startswith(ENGINE_PREFIX):
        return True
    base = name[:-len(TMP_SUFFIX)] if name.endswith(TMP_SUFFIX) else name
    return base in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT,
                    HIGH_WATERMARK_CHECKPOINT, CLEAN_SHUTDOWN_FILE) \
        or (base != name and base.startswith(ENGINE_PREFIX))


def legacy_engine_file(name: str) -> str | None:
    """For a file name used by earlier versions of the engine, its current name (None: the file is a transient
    lock or claim to delete); raises ValueError for a name that is not one."""
    if name == LEGACY_UNCLEANABLE_FILE:
        return UNCLEANABLE_FILE
    if name in LEGACY_LOCK_FILES or name.startswith(LEGACY_CLEANING_CLAIM_PREFIX):
        return None
    if name.startswith(LEGACY_PARTITION_STATE_PREFIX):
        rest = name[len(LEGACY_PARTITION_STATE_PREFIX):]
        if "-" not in rest:  # already the SHA-1 of a name too long for a file name: the same hash now
            return PARTITION_STATE_PREFIX + rest
        return os.path.basename(partition_state_file("", rest))
    raise ValueError(f"{name!r} is not a file name earlier versions of the engine used")


def is_legacy_engine_file(name: str) -> bool:
    return (name in LEGACY_LOCK_FILES or name == LEGACY_UNCLEANABLE_FILE
            or name.startswith((LEGACY_PARTITION_STATE_PREFIX, LEGACY_CLEANING_CLAIM_PREFIX)))
