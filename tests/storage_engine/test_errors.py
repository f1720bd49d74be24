"""Which failures a retry may fix: each error's ``retriable`` and :func:`storage_engine.errors.is_retriable`, the
answer the Airflow tasks (retry or fail at once) and the batch jobs' ``permanent`` field rely on."""
from __future__ import annotations

import errno

import pytest

from storage_engine import errors
from storage_engine.jobs.batches import partition_failure

pytestmark = pytest.mark.unit

PERMANENT_ERRNOS = (errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST,
                    errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP, errno.ENOENT)


def _io_error(code: int | None) -> errors.StorageIOError:
    cause = None if code is None else OSError(code, "x")
    try:
        raise errors.StorageIOError("cannot open", "/logs/t-0", cause) from cause
    except errors.StorageIOError as exc:
        return exc


@pytest.mark.parametrize("code", PERMANENT_ERRNOS)
def test_an_io_error_about_the_path_is_permanent(code):
    assert errors.is_retriable(_io_error(code)) is False


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.EIO, errno.EAGAIN, None])
def test_an_io_error_that_may_pass_is_retriable(code):
    assert errors.is_retriable(_io_error(code)) is True


def test_lock_contention_is_retriable_and_other_engine_errors_are_not():
    assert errors.is_retriable(errors.LogLockedError("locked")) is True
    for cls in (errors.CorruptRecordError, errors.CorruptIndexError, errors.ConfigError, errors.InvalidTopicError,
                errors.PartitionNotFoundError, errors.InvalidRequestError, errors.OffsetOutOfRangeError,
                errors.LogDirOfflineError, errors.InvalidProducerEpochError, errors.StorageError):
        assert errors.is_retriable(cls("bad")) is False, cls


def test_an_exception_not_raised_by_the_engine_is_retriable():
    # A bare OSError did not come through a StorageIOError: nothing says it is permanent, whatever its errno.
    assert errors.is_retriable(OSError(errno.ENOENT, "gone")) is True
    assert errors.is_retriable(RuntimeError("?")) is True


def test_a_partition_failure_is_permanent_when_no_retry_can_fix_it():
    assert partition_failure(("t", 0), _io_error(errno.ENOENT))["permanent"] is True
    assert partition_failure(("t", 0), _io_error(errno.ENOSPC))["permanent"] is False
    assert partition_failure(("t", 0), errors.LogLockedError("locked"))["permanent"] is False
    assert partition_failure(("t", 0), errors.CorruptRecordError("crc"))["permanent"] is True
