"""codec: record batch encode and decode (the format layer), the engine against kafka-python.

For each value size (100 B, 1 KiB) the same generated records are cut into 1000-record batches and, for
each codec (none, lz4):

* engine encode       ``record_batch.build_batch(records, base_offset=..., codec=...)`` per batch;
* kafka-python encode ``DefaultRecordBatchBuilder.append`` per record, then ``build()`` per batch;
* engine decode       ``file_records.iter_batches(buf)`` and ``batch.records()`` over one buffer holding
                      every engine-encoded batch (what a fetch or a segment looks like);
* kafka-python decode ``MemoryRecords(buf)`` and ``list(batch)`` over the very same buffer.

Neither decoder checks CRCs here (kafka-python does not unless asked; the engine checks them on append and
recovery, not in ``records()``). Before timing, each side decodes the other's batches and the records are
compared, so both sides provably do the same work. MB/s counts the uncompressed batch bytes of the records
(their codec-none size) for every row, so the none and lz4 rows are comparable.
"""
from __future__ import annotations

from typing import Callable

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from storage_engine.record import codecs
from storage_engine.segment.file_records import iter_batches
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord

from .harness import Context, Row, Sample, Section, Target, chunks, generate_records, run_interleaved, timed

NAME = "codec"
RECORDS_PER_BATCH = 1000
VALUE_SIZES_BYTES = (100, 1024)
CODECS = (codecs.NONE, codecs.LZ4)
DECODE_TARGET = Target("ratio", 10.0, ">= 10x kafka-python")
# kafka-python stops a batch at batch_size bytes; make it large enough for any 1000-record batch here.
_KAFKA_PYTHON_BATCH_SIZE = 64 << 20
_NO_HEADERS = ()


def engine_encode(batches: list[list[SimpleRecord]], codec: int) -> int:
    size = 0
    for i, records in enumerate(batches):
        size += len(build_batch(records, base_offset=i * RECORDS_PER_BATCH, codec=codec))
    return size


def kafka_python_encode(batches: list[list[SimpleRecord]], codec: int) -> list[bytes]:
    out = []
    for records in batches:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, _KAFKA_PYTHON_BATCH_SIZE)
        append = builder.append
        for offset_delta, r in enumerate(records):
            append(offset_delta, r.timestamp, r.key, r.value, _NO_HEADERS)
        out.append(builder.build())
    return out


def engine_decode(buf: bytes) -> int:
    count = 0
    for batch in iter_batches(buf):
        count += len(batch.records())
    return count


def kafka_python_decode(buf: bytes) -> int:
    count = 0
    for batch in MemoryRecords(buf):
        count += len(list(batch))
    return count


def _engine_view(buf: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value) for b in iter_batches(buf) for r in b.records()]


def _kafka_python_view(buf: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, bytes(r.key), bytes(r.value)) for b in MemoryRecords(buf) for r in b]


def _check_agreement(batches: list[list[SimpleRecord]], codec: int, engine_buf: bytes) -> None:
    """Both decoders read the engine's bytes alike, and the engine reads kafka-python's batches back."""
    expected = [(i, r.timestamp, r.key, r.value) for i, r in enumerate(r for b in batches for r in b)]
    if _engine_view(engine_buf) != expected or _kafka_python_view(engine_buf) != expected:
        raise RuntimeError(f"decoders disagree on engine-encoded {codecs.CODEC_NAMES[codec]} batches")
    kp = kafka_python_encode(batches[:1], codec)[0]
    first = [(r.offset, r.timestamp, r.key, r.value) for b in iter_batches(bytes(kp)) for r in b.records()]
    if first != expected[:RECORDS_PER_BATCH] or next(iter_batches(bytes(kp))).compression != codec:
        raise RuntimeError(f"engine cannot read kafka-python's {codecs.CODEC_NAMES[codec]} batch back")


def run(ctx: Context) -> Section:
    batch_count = 6 if ctx.quick else 40
    section = Section(NAME, "record batch encode/decode, engine vs kafka-python (same records, same bytes)",
                      {"records_per_batch": RECORDS_PER_BATCH, "batches": batch_count,
                       "value_bytes": list(VALUE_SIZES_BYTES), "codecs": [codecs.CODEC_NAMES[c] for c in CODECS],
                       "key": "user-NNNNNNN (12 B)", "headers": 0})
    for seed, value_bytes in enumerate(VALUE_SIZES_BYTES):
        records = generate_records(batch_count * RECORDS_PER_BATCH, value_bytes, seed=seed)
        batches = chunks(records, RECORDS_PER_BATCH)
        plain_bytes = engine_encode(batches, codecs.NONE)
        for codec in CODECS:
            engine_buf = b"".join(build_batch(b, base_offset=i * RECORDS_PER_BATCH, codec=codec)
                                  for i, b in enumerate(batches))
            _check_agreement(batches, codec, engine_buf)
            group = f"{codecs.CODEC_NAMES[codec]}, {value_bytes} B values"

            def decode_case(decoder: Callable[[bytes], int]) -> Callable[[], Sample]:
                def case() -> Sample:
                    sample, count = timed(decoder, engine_buf)
                    if count != len(records):
                        raise RuntimeError(f"{decoder.__name__} decoded {count} records, expected {len(records)}")
                    return sample
                return case

            runs = run_interleaved({
                "engine encode": lambda: timed(engine_encode, batches, codec)[0],
                "kafka-python encode": lambda: timed(kafka_python_encode, batches, codec)[0],
                "engine decode": decode_case(engine_decode),
                "kafka-python decode": decode_case(kafka_python_decode),
            }, ctx.repeats)
            n = len(records)
            section.add(Row(group, "kafka-python encode", n, plain_bytes, runs["kafka-python encode"]))
            section.add(Row(group, "engine encode", n, plain_bytes, runs["engine encode"],
                            baseline="kafka-python encode"))
            section.add(Row(group, "kafka-python decode", n, plain_bytes, runs["kafka-python decode"]))
            section.add(Row(group, "engine decode", n, plain_bytes, runs["engine decode"],
                            baseline="kafka-python decode", target=DECODE_TARGET))
            section.notes.append(f"{group}: batches hold {plain_bytes / batch_count / 1000:,.1f} KB each "
                                 f"uncompressed, {len(engine_buf) / batch_count / 1000:,.1f} KB as encoded")
    return section
