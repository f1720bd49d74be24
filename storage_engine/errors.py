"""Typed errors of the storage engine, all in one place.

Every failure the engine reports is a :class:`StorageError`. Corrupt input never surfaces as
``struct.error``, ``IndexError`` or ``AssertionError``: the parsers catch those at their boundary and
raise one of the errors below, naming the file and the byte position where the damage was found.
``OSError`` is wrapped in :class:`StorageIOError` at the few places that touch the filesystem.

Each error says whether a retry may help (``retriable``, Kafka's ``RetriableException`` hierarchy), and
:func:`is_retriable` answers for any exception: what the Airflow tasks and the batch jobs ask before retrying.
"""
from __future__ import annotations

import errno


class StorageError(Exception):
    """Base class of every error the engine raises on purpose.

    ``retriable``: whether the same operation may succeed when tried again. False unless a subclass says
    otherwise: a missing partition, an invalid config or name, corrupt bytes (Kafka retries a
    ``CorruptRecordException``, which another replica may serve clean; here a retry reads the same file) fail
    the same way every time. Lock contention (:class:`LogLockedError`) and I/O that may pass
    (:class:`StorageIOError` by its errno) are retriable."""

    retriable: bool = False


class _Located(StorageError):
    """An error about bytes at a known place: ``path`` (may be None for in-memory buffers) and ``position``."""

    def __init__(self, message: str, path: object = None, position: int | None = None):
        self.reason = message
        self.path = None if path is None else str(path)
        self.position = position
        where = []
        if self.path is not None:
            where.append(f"file {self.path}")
        if position is not None:
            where.append(f"byte position {position}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)

    def located(self, path: object = None, base_position: int = 0) -> "_Located":
        """Return a copy of this error placed in ``path`` with positions shifted by ``base_position``."""
        pos = None if self.position is None else self.position + base_position
        return type(self)(self.reason, path if path is not None else self.path, pos)


class CorruptRecordError(_Located):
    """Bytes that do not parse as records: a bad size field, a CRC mismatch, an unknown magic, a truncation, or a
    record inside a batch that is malformed (a bad varint, declared sizes that do not add up, bad headers)."""


class InvalidRecordError(_Located):
    """Records a caller asked to append that the log refuses: a field of the wrong type, an empty append, a batch
    whose declared counts do not match its records. A sibling of :class:`CorruptRecordError`, as Kafka's
    ``InvalidRecordException`` is of ``CorruptRecordException``: the caller's mistake, not damage."""


class CompressionError(CorruptRecordError):
    """A compressed payload could not be decoded (bad frame, checksum or block size)."""


class CorruptIndexError(_Located):
    """An ``.index``/``.timeindex`` file violates its invariants (length, ordering, offsets below base)."""


class InvalidOffsetError(StorageError):
    """An offset was appended out of order or outside what an index or segment can hold."""


class IndexOffsetOverflowError(InvalidOffsetError):
    """offset - base_offset does not fit the 32-bit relative offset of an index entry."""


class SegmentOffsetOverflowError(InvalidOffsetError):
    """A batch's last offset is not representable relative to its segment's base offset."""


class IndexFullError(StorageError):
    """Appending to an index that has no free slot left."""


class OffsetOutOfRangeError(StorageError):
    """A read or delete-records request names an offset outside [log start, log end]."""


class OffsetInRemoteStorageError(OffsetOutOfRangeError):
    """A read of a tiered partition names an offset in ``[log start offset, local log start offset)``: its records
    are no longer in a local segment, only in the remote copy (Kafka: the local log's ``OffsetOutOfRangeException``
    that the fetch path turns into a remote read). A subclass of :class:`OffsetOutOfRangeError`, so a caller that
    knows nothing of remote storage behaves as before; one that does reads ``offset`` from the object store."""

    def __init__(self, offset: int, local_log_start_offset: int, message: str | None = None):
        super().__init__(message or f"offset {offset} is in remote storage (the first local offset is "
                                    f"{local_log_start_offset})")
        self.offset = offset
        self.local_log_start_offset = local_log_start_offset

    def __reduce__(self) -> tuple:
        return type(self), (self.offset, self.local_log_start_offset, str(self))


class DataLossError(StorageError):
    """A read of offsets the log once held and lost (a segment deleted or emptied outside the engine), recorded
    at load (:mod:`storage_engine.log.losses`): the read fails instead of skipping them, until an operator
    accepts the loss (``accept-loss``)."""


class PartitionUnreadableError(StorageError):
    """A partition maintenance cannot read: its folder became a file or vanished while the log dir's checkpoint
    files still list it, or one of its segment files is not a regular file. Permanent: an operator must act."""


class RecordTooLargeError(StorageError):
    """A batch is larger than ``max.message.bytes`` or ``segment.bytes`` allows."""


class RecordBatchTooLargeError(RecordTooLargeError):
    """An append larger than ``segment.bytes``: it could not fit in one segment (Kafka's
    ``RecordBatchTooLargeException``, RECORD_LIST_TOO_LARGE on the wire; a batch over ``max.message.bytes`` is
    MESSAGE_TOO_LARGE)."""


class InvalidRecordForTopicError(StorageError):
    """A record that the topic does not accept, such as a keyless record on a compacted topic."""


class InvalidRequestError(StorageError, ValueError):
    """A request the engine cannot accept as given: a missing or contradictory argument, an unknown topic in a
    filter, a file named on the command line that does not exist. The CLI exits 2 for it."""


class PartitionNotFoundError(InvalidRequestError):
    """A topic or partition named by the caller does not exist in any log dir."""


class PartitionDeletedError(PartitionNotFoundError):
    """The partition was deleted (its folder renamed ``-delete``) while this process had it open."""


class PartitionMovedError(StorageError):
    """The folder a log was opened from is no longer the partition's home: it moved to another log dir. A
    ``Log`` follows the move itself; this surfaces only where no log dirs are known to look in."""


class LogDirOfflineError(StorageError):
    """Kafka's ``KafkaStorageException``: the log dir holding the partition had an I/O error and is offline in
    this process; its partitions are unavailable, the other log dirs keep working."""

    def __init__(self, message: str, log_dir: str | None = None):
        self.log_dir = log_dir
        super().__init__(message)


class ConfigError(StorageError, ValueError):
    """An invalid configuration key or value; the message names the key, the value and the allowed range."""


class InvalidTopicError(StorageError, ValueError):
    """A topic name or partition number that Kafka would reject (or that would escape the log dir)."""


class CorruptSnapshotError(_Located):
    """A producer-state ``.snapshot`` whose version, structure or CRC is wrong (Kafka's ``CorruptSnapshotException``);
    the loader deletes it and falls back to an older snapshot."""


class ProducerStateError(StorageError):
    """An append that the producer state refuses (Kafka's producer-state exceptions; ``kafka_name`` is Kafka's
    error name, as a client would see it)."""

    kafka_name = "UNKNOWN_SERVER_ERROR"


class InvalidProducerEpochError(ProducerStateError):
    """A batch or marker whose producer epoch is older than the producer's current one (a fenced producer)."""

    kafka_name = "INVALID_PRODUCER_EPOCH"


class OutOfOrderSequenceError(ProducerStateError):
    """A batch whose first sequence does not follow the producer's last sequence."""

    kafka_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch from a producer with an open transaction."""

    kafka_name = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(ProducerStateError):
    """A transaction marker whose coordinator epoch is older than the last one seen for the producer."""

    kafka_name = "TRANSACTION_COORDINATOR_FENCED"


class CorruptCheckpointError(_Located):
    """A checkpoint file that does not follow Kafka's text format."""


class UnsafeFileError(StorageError):
    """A file the engine reads whole (a config, a checkpoint, a state record) that is no regular file, or larger
    than the bound for its kind: reading it could block for ever (a FIFO) or never end (``/dev/zero``).
    ``reason``: ``not a regular file (a character device)`` or ``too large (N bytes, limit M)``."""

    def __init__(self, path: object, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class LogLockedError(StorageError):
    """Another process holds a lock this operation needed and the caller asked not to wait."""

    retriable = True


# errno values of an OSError that a retry cannot change (the path is wrong, not busy or full).
_PERMANENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY,
                               errno.EEXIST, errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP, errno.ENOENT})


class StorageIOError(StorageError):
    """An operating-system error while touching log files, wrapped with the path involved (raised ``from`` the
    ``cause``). Retriable unless the cause's errno says the path is wrong (missing, not a directory, not
    permitted, read-only): a full disk, too many open files or ``EIO`` may pass."""

    def __init__(self, message: str, path: object = None, cause: BaseException | None = None):
        self.retriable = not (isinstance(cause, OSError) and cause.errno in _PERMANENT_ERRNOS)
        self.path = None if path is None else str(path)
        text = message if self.path is None else f"{message}: {self.path}"
        if cause is not None:
            text = f"{text}: {cause}"
        hint = descriptor_limit_hint(cause)
        if hint:
            text = f"{text}. {hint}"
        super().__init__(text)


class RemoteStorageError(StorageError):
    """A failure of the object store holding tiered segments (:mod:`storage_engine.tiered.object_store`). ``fix``
    says what the operator does about it (the alert of a tiering task names it); the message ends with it.
    Nothing local is deleted because of one: the local copies stay until their remote copy is verified."""

    def __init__(self, message: str, fix: str | None = None):
        self.reason = message
        self.fix = fix
        super().__init__(f"{message}; fix: {fix}" if fix else message)


class RemoteStoreUnreachableError(RemoteStorageError):
    """The object store does not answer (connection refused, timed out, reset): retriable, it may come back."""

    retriable = True

    def __init__(self, endpoint: str | None, detail: str):
        self.endpoint = endpoint
        where = endpoint or "the default AWS S3 endpoint"
        super().__init__(f"the object store at {where} is unreachable: {detail}",
                         f"start the object store at {where} or fix rsm.config.storage.s3.endpoint.url")


class RemoteBucketMissingError(RemoteStorageError):
    """The configured bucket does not exist (the engine never creates one: an operator's decision)."""

    def __init__(self, bucket: str, endpoint: str | None):
        self.bucket = bucket
        super().__init__(f"bucket {bucket!r} does not exist in the object store at {endpoint or 'AWS S3'}",
                         f"create bucket {bucket} or fix rsm.config.storage.s3.bucket.name")


class RemoteCredentialsError(RemoteStorageError):
    """The object store refuses the configured credentials (unknown key id, wrong secret, access denied)."""

    def __init__(self, detail: str):
        super().__init__(f"the object store refuses the credentials: {detail}",
                         "fix rsm.config.storage.aws.access.key.id and rsm.config.storage.aws.secret.access.key "
                         "(or the bucket's access rights)")


def _offsets_text(offsets: tuple[int, int] | None) -> str:
    return f" (offsets {offsets[0]} to {offsets[1]})" if offsets else ""


class RemoteObjectMissingError(RemoteStorageError):
    """An object the metadata names is not in the store (deleted behind the store's back): the records in
    ``offsets`` (first, last; None when unknown) are lost from remote storage."""

    def __init__(self, key: str, offsets: tuple[int, int] | None = None):
        self.key, self.offsets = key, offsets
        super().__init__(f"remote object {key} is missing{_offsets_text(offsets)}",
                         "restore the object from a backup, or accept the loss (its records are gone)")


class RemoteObjectDamagedError(RemoteStorageError):
    """An object in the store is not what was uploaded (size, checksum or record CRC wrong): never handed out."""

    def __init__(self, key: str, offsets: tuple[int, int] | None = None, detail: str = ""):
        self.key, self.offsets, self.detail = key, offsets, detail
        super().__init__(f"remote object {key} is damaged{_offsets_text(offsets)}: {detail}",
                         "restore the object from a backup, or accept the loss (its records are gone)")


def is_retriable(exc: BaseException) -> bool:
    """Whether retrying the operation that raised ``exc`` may succeed: a :class:`StorageError` by its
    ``retriable``; anything else (not raised on purpose, so not known to be permanent) is retriable."""
    return exc.retriable if isinstance(exc, StorageError) else True


def descriptor_limit_hint(cause: BaseException | None) -> str | None:
    """What to do when the process (EMFILE) or the system (ENFILE) ran out of file descriptors."""
    if not isinstance(cause, OSError) or cause.errno not in (errno.EMFILE, errno.ENFILE):
        return None
    if cause.errno == errno.ENFILE:
        return ("The system-wide open-file table is full (fs.file-max): raise it with sysctl, or close other "
                "processes' files")
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (f"This process reached its open-file limit (RLIMIT_NOFILE soft limit {soft}, hard limit {hard}): "
            f"raise it (ulimit -n, LimitNOFILE= in a systemd unit) or open fewer logs at once (the engine keeps "
            f"the files of at most LogManager's max_open_logs partitions open)")
