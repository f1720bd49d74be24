"""The cleaner's round report at its boundaries (MUTATION.md: what the mutants of cleaner.py showed the other tests
let through). Kafka's ``LogCleaner.recordStats`` logs each round as these lines (``mb = bytes / (1024 * 1024)``,
Java's ``%,.1f`` and ``%,d``: thousands separators, one decimal), and the engine's run report carries the same
figures as numbers: sizes in MB to 3 decimals, percentages to 2, with no division by zero for an empty round."""
from __future__ import annotations

import pytest

from storage_engine.maintenance.cleaner import MB, CleanerStats

pytestmark = pytest.mark.unit


def stats(**kw) -> CleanerStats:
    base = dict(bytes_read=3703701, messages_read=1000, bytes_written=1234567, messages_written=250,
                map_bytes_read=2 * MB + 12345, map_messages_read=700, invalid_messages_read=3, tombstones_removed=5,
                buffer_utilization=0.123456, start_s=100.0, map_complete_s=100.5, end_s=102.0)
    return CleanerStats(**{**base, **kw})


def test_round_figures():
    assert stats().as_dict() == {
        "mb_read": 3.532, "mb_written": 1.177,                 # 3703701 / 2**20 = 3.53213..., 1234567 / 2**20
        "bytes_read": 3703701, "bytes_written": 1234567,
        "messages_read": 1000, "messages_written": 250, "records_removed": 750,
        "map_bytes_read": 2109497, "map_messages_read": 700,
        "invalid_messages_read": 3, "tombstones_removed": 5,
        "map_utilization_percent": 12.35,
        "elapsed_s": 2.0, "map_s": 0.5, "clean_s": 1.5,
        "mb_per_s": 1.766,                                     # 3.53213 MB / 2 s
        "size_reduction_percent": 66.67, "fewer_messages_percent": 75.0,
    }


def test_round_log_lines_as_kafka_prints_them():
    assert stats().log_lines("t-0", 10, 99) == [
        "Log cleaner cleaned log t-0 (dirty section = [10, 99])",
        "3.5 MB of log processed in 2.0 seconds (1.8 MB/sec).",
        "Indexed 2.0 MB in 0.5 seconds (4.0 Mb/sec, 25.0% of total time)",
        "Buffer utilization: 12.3%",
        "Cleaned 3.5 MB in 1.5 seconds (2.4 Mb/sec, 75.0% of total time)",
        "Start size: 3.5 MB (1,000 messages)",
        "End size: 1.2 MB (250 messages)",
        "66.7% size reduction (75.0% fewer messages)",
    ]


def test_large_round_uses_thousands_separators():
    big = stats(bytes_read=1500 * MB, messages_read=12_345_678, bytes_written=1200 * MB, messages_written=2_000_000,
                map_bytes_read=1500 * MB, start_s=0.0, map_complete_s=1000.0, end_s=3000.0)
    lines = big.log_lines("t-0", 0, 1)
    assert lines[1] == "1,500.0 MB of log processed in 3,000.0 seconds (0.5 MB/sec)."
    assert lines[2] == "Indexed 1,500.0 MB in 1,000.0 seconds (1.5 Mb/sec, 33.3% of total time)"
    assert lines[4] == "Cleaned 1,500.0 MB in 2,000.0 seconds (0.8 Mb/sec, 66.7% of total time)"
    assert lines[5] == "Start size: 1,500.0 MB (12,345,678 messages)"
    assert lines[6] == "End size: 1,200.0 MB (2,000,000 messages)"
    assert lines[7] == "20.0% size reduction (83.8% fewer messages)"


def test_empty_round_reports_zeros():
    """A round that read nothing (every segment already clean) reports 0 %, not a division by zero."""
    empty = CleanerStats(start_s=5.0, map_complete_s=5.0, end_s=5.0).as_dict()
    assert (empty["size_reduction_percent"], empty["fewer_messages_percent"], empty["mb_per_s"]) == (0.0, 0.0, 0.0)
    assert (empty["elapsed_s"], empty["map_s"], empty["clean_s"]) == (0.0, 0.0, 0.0)
    lines = CleanerStats(start_s=5.0, map_complete_s=5.0, end_s=5.0).log_lines("t-0", 0, 0)
    assert lines[1] == "0.0 MB of log processed in 0.0 seconds (0.0 MB/sec)."
    assert lines[7] == "0.0% size reduction (0.0% fewer messages)"


def test_sub_second_round_divides_by_its_real_durations():
    """Rates and shares of a round shorter than a second: the 1e-9 floor only guards against a zero duration, it
    does not round a short phase up to a second (Kafka divides by the measured elapsed time)."""
    lines = stats(start_s=100.0, map_complete_s=100.125, end_s=100.5).log_lines("t-0", 0, 1)
    assert lines[1] == "3.5 MB of log processed in 0.5 seconds (7.1 MB/sec)."     # 3.532 MB / 0.5 s
    assert lines[2] == "Indexed 2.0 MB in 0.1 seconds (16.1 Mb/sec, 25.0% of total time)"   # 2.012 MB / 0.125 s
    assert lines[4] == "Cleaned 3.5 MB in 0.4 seconds (9.4 Mb/sec, 75.0% of total time)"   # 3.532 MB / 0.375 s
