"""The Kafka error code a client gets for each engine error (Kafka's ``Errors``), and a log line for each."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from storage_engine.errors import (CompressionError, CorruptRecordError, DataLossError, InvalidRecordError,
                                   InvalidRecordForTopicError, InvalidTopicError, LogDirOfflineError, LogLockedError,
                                   OffsetOutOfRangeError, PartitionNotFoundError, PartitionUnreadableError,
                                   ProducerStateError, RecordTooLargeError, StorageError, StorageIOError)

# Most specific first: the first class the error is an instance of decides.
_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (CompressionError, ErrorCode.corrupt_message),
    (CorruptRecordError, ErrorCode.corrupt_message),
    (InvalidRecordForTopicError, ErrorCode.invalid_record),
    (InvalidRecordError, ErrorCode.invalid_record),
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
    """Kafka's code for ``exc``; producer-state errors carry Kafka's name themselves."""
    if isinstance(exc, ProducerStateError):
        return ErrorCode[exc.kafka_name.lower()]
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, StorageError):
        return ErrorCode.kafka_storage_error
    return ErrorCode.unknown_server_error


def message(exc: BaseException) -> str:
    """One line for the client's error message and the server log."""
    return " ".join(str(exc).split())[:500] or type(exc).__name__
