"""Quick check of the compiled speedups: records/s of the C and Python record loops against kafka-python.

``python -m benchmarks.speedups_quick [--batches N]``. Not a test and not part of ``python -m benchmarks``:
a one-screen comparison of 1000-record batches of 100-byte values (16-byte keys, no headers):

* decode: ``records.decode_records`` over one batch's records section (what ``RecordBatch.records()`` does
  after decompression), against kafka-python's ``list(DefaultRecordBatch(batch))``;
* encode: ``records.encode_records`` (the records section alone) and ``record_batch.build_batch`` (whole batch:
  header, CRC-32C), against kafka-python's ``DefaultRecordBatchBuilder.append`` x 1000 + ``build()``;
* append: ``build_batch`` plus ``os.write`` of every batch to a file (no fsync), the producer-side cost.

Cases run interleaved, round after round, and each figure is the best round; time is this process's CPU
time (``time.process_time``: user + system, so ``os.write`` counts), which other load on a shared machine
distorts far less than wall-clock time.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any, Callable

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage_engine.record import kernels, record_batch, records

RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
ROUNDS = 7
BASE_TIMESTAMP_MS = 1_700_000_000_000


def _records(batch_index: int) -> list[records.SimpleRecord]:
    value = bytes(range(VALUE_BYTES))
    start = batch_index * RECORDS_PER_BATCH
    return [records.SimpleRecord(b"key-%012d" % (start + i), value, BASE_TIMESTAMP_MS + i)
            for i in range(RECORDS_PER_BATCH)]


def _best_rates(cases: dict, n_records: int) -> dict:
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(ROUNDS):
        for name, fn in cases.items():
            t0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - t0)
    return {name: n_records / seconds for name, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    batch_records = [_records(b) for b in range(args.batches)]
    batches = [record_batch.build_batch(recs, base_offset=b * RECORDS_PER_BATCH)
               for b, recs in enumerate(batch_records)]
    sections = [record_batch.RecordBatch(batch).records_payload() for batch in batches]
    n = args.batches * RECORDS_PER_BATCH
    impls = {"python": (records._py_decode_records, records._py_encode_records)}
    if records._c_decode_records is not None:
        impls["c"] = (records._c_decode_records, records._c_encode_records)

    def kp_decode() -> None:
        for batch in batches:
            list(DefaultRecordBatch(batch))

    def kp_encode() -> None:
        for b, recs in enumerate(batch_records):
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                                producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                                batch_size=1 << 30)
            for i, r in enumerate(recs):
                builder.append(i, r.timestamp, r.key, r.value, [])
            builder.build()

    cases = {("kafka-python", "decode"): kp_decode, ("kafka-python", "encode (whole batch)"): kp_encode}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (decode, encode) in impls.items():
            # Default arguments bind this implementation's functions (closures would all see the last one).
            def decode_all(decode: Callable[..., Any] = decode) -> None:
                for b, section in enumerate(sections):
                    decode(section, RECORDS_PER_BATCH, b * RECORDS_PER_BATCH, BASE_TIMESTAMP_MS, None)

            def encode_all(encode: Callable[..., Any] = encode) -> None:
                for recs in batch_records:
                    encode(recs, None, 0, BASE_TIMESTAMP_MS)

            def build_all(encode: Callable[..., Any] = encode) -> None:
                record_batch.encode_records = encode  # what build_batch calls
                for b, recs in enumerate(batch_records):
                    record_batch.build_batch(recs, base_offset=b * RECORDS_PER_BATCH)

            def append_all(encode: Callable[..., Any] = encode, path: str = os.path.join(tmp, f"{name}.log")) -> None:
                record_batch.encode_records = encode
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                try:
                    for b, recs in enumerate(batch_records):
                        os.write(fd, record_batch.build_batch(recs, base_offset=b * RECORDS_PER_BATCH))
                finally:
                    os.close(fd)

            cases.update({(name, "decode"): decode_all, (name, "encode (records section)"): encode_all,
                          (name, "encode (whole batch)"): build_all,
                          (name, "append (build_batch + os.write)"): append_all})
        saved = record_batch.encode_records
        try:
            rates = _best_rates(cases, n)
        finally:
            record_batch.encode_records = saved
    rows = [(impl, what, rate) for (impl, what), rate in rates.items()]
    kp = {what: rate for impl, what, rate in rows if impl == "kafka-python"}
    print(f"{args.batches} batches x {RECORDS_PER_BATCH} records, {VALUE_BYTES}-byte values "
          f"(kernels.IMPLEMENTATION = {kernels.IMPLEMENTATION!r})")
    for impl, what, rate in rows:
        base = kp.get(what) or (kp["encode (whole batch)"] if what.startswith(("encode", "append")) else None)
        ratio = f"{rate / base:6.2f}x kafka-python" if base and impl != "kafka-python" else ""
        print(f"  {impl:<13} {what:<33} {rate / 1e6:8.3f} M records/s  {ratio}")


if __name__ == "__main__":
    main()
