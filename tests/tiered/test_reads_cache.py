"""The remote storage cache: bounded, least recently used first, shared by processes, and never handing out an
entry that a crash or damage left incomplete."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from storage_engine.tiered.cache import SUFFIX, TMP_PREFIX, TRAILER, ChunkCache

pytestmark = [pytest.mark.unit, pytest.mark.tiered]


def _loader(data: bytes, calls: list[str], name: str):
    def load() -> bytes:
        calls.append(name)
        return data
    return load


def test_entries_are_served_from_the_cache_once_loaded(tmp_path):
    cache = ChunkCache(str(tmp_path / "c"), 1 << 20)
    calls: list[str] = []
    assert cache.get("a", _loader(b"x" * 100, calls, "a")) == b"x" * 100
    assert cache.get("a", _loader(b"never", calls, "a")) == b"x" * 100
    assert calls == ["a"]
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)


def test_the_cache_stays_within_its_bound_and_evicts_the_least_recently_used(tmp_path):
    entry = 1000
    bound = 5 * (entry + TRAILER.size)
    cache = ChunkCache(str(tmp_path / "c"), bound)
    calls: list[str] = []
    for i in range(5):
        cache.get(f"k{i}", _loader(bytes([i]) * entry, calls, f"k{i}"))
    cache.get("k0", _loader(b"", calls, "k0-again"))      # k0 is now the most recently used
    cache.get("k5", _loader(b"\x05" * entry, calls, "k5"))   # evicts k1, the least recently used
    assert os.path.exists(cache.path_of("k0")) and not os.path.exists(cache.path_of("k1"))
    for i in range(6, 40):
        cache.get(f"k{i}", _loader(bytes([i]) * entry, calls, f"k{i}"))
        assert cache.size_bytes() <= bound
    assert cache.stats.evictions == 35
    calls.clear()
    cache.get("k39", _loader(b"", calls, "k39"))          # the newest survived
    cache.get("k1", _loader(b"\x01" * entry, calls, "k1"))   # an old one was evicted and is loaded again
    assert calls == ["k1"]
    assert cache.size_bytes() <= bound


def test_an_entry_larger_than_the_bound_is_used_but_not_kept(tmp_path):
    cache = ChunkCache(str(tmp_path / "c"), 100)
    calls: list[str] = []
    assert cache.get("big", _loader(b"b" * 500, calls, "big")) == b"b" * 500
    assert cache.get("big", _loader(b"b" * 500, calls, "big")) == b"b" * 500
    assert calls == ["big", "big"]
    assert cache.size_bytes() == 0


@pytest.mark.parametrize("damage", ["truncated", "zeroed", "flipped"])
def test_an_incomplete_or_damaged_entry_is_never_used(tmp_path, damage):
    cache = ChunkCache(str(tmp_path / "c"), 1 << 20)
    data = os.urandom(4096)
    cache.get("seg#0", lambda: data)
    path = cache.path_of("seg#0")
    raw = bytearray(open(path, "rb").read())
    if damage == "truncated":          # a power cut after the rename, before all the data reached the disk
        raw = raw[:1000]
    elif damage == "zeroed":
        raw = bytearray(len(raw))
    else:
        raw[100] ^= 0x01
    with open(path, "wb") as f:
        f.write(raw)
    calls: list[str] = []
    assert cache.get("seg#0", _loader(data, calls, "reload")) == data
    assert calls == ["reload"]
    assert cache.stats.damaged == 1
    assert open(path, "rb").read()[:len(data)] == data       # replaced by a whole entry


def test_temp_files_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    (folder / f"{TMP_PREFIX}{int(dead.stdout)}-abc").write_bytes(b"half")
    (folder / f"{TMP_PREFIX}{os.getpid()}-def").write_bytes(b"mine")
    ChunkCache(str(folder), 1 << 20)
    assert sorted(os.listdir(folder)) == [f"{TMP_PREFIX}{os.getpid()}-def"]


def test_two_processes_sharing_the_folder_keep_one_bound(tmp_path):
    folder = str(tmp_path / "c")
    bound = 20 * (1000 + TRAILER.size)
    script = ("import sys\nfrom storage_engine.tiered.cache import ChunkCache\n"
              "c = ChunkCache(sys.argv[1], int(sys.argv[2]))\n"
              "for i in range(60): c.get(sys.argv[3] + str(i), lambda: b'z' * 1000)\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, "-c", script, folder, str(bound), tag], env=env)
             for tag in ("a", "b")]
    assert [p.wait() for p in procs] == [0, 0]
    cache = ChunkCache(folder, bound)
    assert 0 < cache.size_bytes() <= bound
    assert all(n.endswith(SUFFIX) or n == ".lock" for n in os.listdir(folder))


def test_an_entry_is_checked_once_then_served_from_memory_only_while_its_file_is_untouched(tmp_path):
    """Memory holds an entry this process checked while the folder holds the very file it checked, untouched: a
    removed file, a file written to, or one another process used (touched) is read and checked again, or loaded."""
    cache = ChunkCache(str(tmp_path / "c"), 1 << 20)
    path = cache.path_of("seg#0")
    calls: list[str] = []
    data = os.urandom(4096)
    assert cache.get("seg#0", _loader(data, calls, "first")) == data
    for _ in range(3):
        assert cache.get("seg#0", _loader(b"", calls, "never")) == data
    assert (cache.stats.hits, cache.stats.memory_hits, cache.stats.misses) == (3, 3, 1)     # no file read
    os.utime(path, ns=(1, 1))                      # another process's use: the file is read and checked again
    assert cache.get("seg#0", _loader(b"", calls, "never")) == data
    assert (cache.stats.hits, cache.stats.memory_hits) == (4, 3)
    other = ChunkCache(str(tmp_path / "c"), 1 << 20)           # another process replaces the entry
    os.remove(path)
    newer = os.urandom(4096)
    assert other.get("seg#0", _loader(newer, calls, "other")) == newer
    assert cache.get("seg#0", _loader(b"", calls, "never")) == newer       # the folder's bytes, not memory's
    os.remove(path)                                                         # evicted: loaded again
    assert cache.get("seg#0", _loader(data, calls, "again")) == data
    assert calls == ["first", "other", "again"]


def test_memory_keeps_the_most_recent_entries_within_its_bound_and_never_more_than_the_folder(tmp_path):
    entry = 1000
    cache = ChunkCache(str(tmp_path / "c"), 1 << 20, memory_bytes=3 * entry)
    for i in range(4):
        cache.get(f"k{i}", _loader(bytes([i]) * entry, [], f"k{i}"))
    assert [cache.in_memory(f"k{i}") for i in range(4)] == [False, True, True, True]
    assert cache.get("k0", _loader(b"", [], "k0")) == b"\x00" * entry       # its file, checked again
    assert (cache.stats.hits, cache.stats.memory_hits) == (1, 0)
    small = ChunkCache(str(tmp_path / "s"), 100)        # an entry the folder cannot keep is not held in memory
    calls: list[str] = []
    small.get("big", _loader(b"b" * 500, calls, "big"))
    small.get("big", _loader(b"b" * 500, calls, "big"))
    assert calls == ["big", "big"] and not small.in_memory("big")
