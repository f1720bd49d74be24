"""Another process may shrink a segment's files at any time (a torn tail cut away, a preallocated file trimmed on
roll, an index rebuilt). A process reading them must never fault: touching a memory-mapped page past the end of
a file is SIGBUS, which killed a writer in a torture run. Reads go through ``pread``; each scenario runs
in a child process so a fault would show as its death, not as this test process's.
"""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.paths import REPO
from tests.storage_engine.kernels import split_by_process_fixture

pytestmark = pytest.mark.unit

# Once, not once per kernel implementation: the work is in child processes (see split_by_process_fixture).
kernels = split_by_process_fixture()

SETUP = """
import os, sys
from storage_engine.config import LogConfig
from storage_engine.record.record_batch import build_batch
from storage_engine.record.records import SimpleRecord
from storage_engine.segment.segment import LogSegment
d = sys.argv[1]
cfg = LogConfig(index_interval_bytes=1, segment_index_bytes=4096 * 8)
writer = LogSegment.open(d, 0, cfg, now_ms=0)
for i in range(2000):
    writer.append(i, 0, i, build_batch([SimpleRecord(b"k", b"v" * 500)], base_offset=i))
reader = LogSegment.open(d, 0, cfg, now_ms=0, file_already_exists=True, writable=False)
list(reader.log.read_batches(0))            # read once: a mapping would now cover the whole file
reader.offset_index.lookup(1500)
shrink = os.open(writer.path, os.O_RDWR)
"""

SCENARIOS = {
    "log-cut-under-a-reader": SETUP + """
os.ftruncate(shrink, 4096)
n = sum(1 for _ in reader.log.read_batches(0))
print("batches", n)
data = reader.read(100, 1 << 20)
print("read", data)
""",
    "index-trimmed-under-a-reader": SETUP + """
os.ftruncate(os.open(writer.offset_index.path, os.O_RDWR), 0)
print("lookup", reader.offset_index.lookup(1999))
reader.offset_index.refresh()
print("entries after refresh", reader.offset_index.entries)
""",
}

# The same scenario through a memory map: shows the fault is real on this machine (the control).
CONTROL = """
import mmap, os, sys
path = os.path.join(sys.argv[1], "f")
with open(path, "wb") as f:
    f.write(b"x" * (1 << 20))
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 1 << 20, access=mmap.ACCESS_READ)
os.ftruncate(fd, 4096)
print(m[1 << 19])
"""


def run(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=str(REPO), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.kills
def test_the_control_a_mapped_page_past_the_end_is_sigbus(tmp_path):
    assert run(CONTROL, tmp_path).returncode == -signal.SIGBUS


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_reader_survives_files_shrinking_under_it(tmp_path, scenario):
    res = run(SCENARIOS[scenario], tmp_path)
    assert res.returncode == 0, (res.returncode, res.stderr[-3000:])
    if scenario == "log-cut-under-a-reader":
        assert "batches" in res.stdout and int(res.stdout.split()[1]) < 2000  # it ends where the file now ends
    else:
        assert "entries after refresh 0" in res.stdout
