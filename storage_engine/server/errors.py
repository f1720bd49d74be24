"""The broker's one error vocabulary: kio's ``ErrorCode`` (Kafka's ``Errors``, generated from Kafka's own list).
Every response's error code is an ``ErrorCode`` member, and this module is the one place an exception becomes one:
the engine's errors (:mod:`storage_engine.errors`, :class:`~storage_engine.log.topic_changes.TopicChangeError`)
by :func:`error_code`, a request the broker refuses by :class:`TopicError`, which carries its code.
:func:`describe` gives both the code and the client's error message of any exception."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from storage_engine.errors import (CompressionError, CorruptRecordError, DataLossError, InvalidRecordError,
                                   InvalidRecordForTopicError, InvalidTopicError, LogDirOfflineError, LogLockedError,
                                   OffsetOutOfRangeError, PartitionNotFoundError, PartitionUnreadableError,
                                   ProducerStateError, RecordBatchTooLargeError, RecordTooLargeError,
                                   RemoteObjectDamagedError, StorageError, StorageIOError)
from storage_engine.log.topic_changes import TopicChangeError

__all__ = ["ErrorCode", "TopicError", "describe", "error_code", "message"]


class TopicError(Exception):
    """A topic or config request refused with Kafka's ``code`` (INVALID_CONFIG, TOPIC_ALREADY_EXISTS, ...); its
    message goes to the client as it is."""

    def __init__(self, code: ErrorCode, message: str):
        self.error_code = code
        self.code = code.name          # the member's name (``topic_already_exists``), as the coordinators compare it
        super().__init__(message)


# Most specific first: the first class the error is an instance of decides.
_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (CompressionError, ErrorCode.corrupt_message),
    (CorruptRecordError, ErrorCode.corrupt_message),
    (RemoteObjectDamagedError, ErrorCode.corrupt_message),    # as local damage (Kafka: UNKNOWN_SERVER_ERROR)
    (InvalidRecordForTopicError, ErrorCode.invalid_record),
    (InvalidRecordError, ErrorCode.invalid_record),
    (RecordBatchTooLargeError, ErrorCode.record_list_too_large),   # larger than segment.bytes (Kafka's rule)
    (RecordTooLargeError, ErrorCode.message_too_large),
    (OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (PartitionNotFoundError, ErrorCode.unknown_topic_or_partition),
    (InvalidTopicError, ErrorCode.invalid_topic_exception),
    (LogDirOfflineError, ErrorCode.kafka_storage_error),
    (PartitionUnreadableError, ErrorCode.kafka_storage_error),
    (DataLossError, ErrorCode.kafka_storage_error),
    (StorageIOError, ErrorCode.kafka_storage_error),
    (LogLockedError, ErrorCode.request_timed_out),
)


def error_code(exc: BaseException) -> ErrorCode:
    """Kafka's code for ``exc``; producer-state errors and refused topic changes carry Kafka's name themselves."""
    if isinstance(exc, TopicError):
        return exc.error_code
    if isinstance(exc, ProducerStateError):
        return ErrorCode[exc.kafka_name.lower()]
    if isinstance(exc, TopicChangeError):
        return ErrorCode[exc.code]
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, StorageError):
        return ErrorCode.kafka_storage_error
    return ErrorCode.unknown_server_error


def message(exc: BaseException) -> str:
    """One line for the client's error message and the server log."""
    return " ".join(str(exc).split())[:500] or type(exc).__name__


def describe(exc: BaseException) -> tuple[ErrorCode, str]:
    """The code and the client's message for ``exc``: a :class:`TopicError`'s own text, any other as one line."""
    if isinstance(exc, TopicError):
        return exc.error_code, str(exc)
    return error_code(exc), message(exc)
