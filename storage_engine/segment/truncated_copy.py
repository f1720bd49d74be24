"""A segment's kept prefix written to new files: the first half of a truncation by rewrite
(:mod:`storage_engine.log.rewrite` swaps the copy in).

A truncation never cuts a ``.log`` file that may have been read: ``sendfile`` queues page-cache pages by
reference, so bytes a fetch already handed to the kernel would change under it if the file were cut in place and
written again. Instead :func:`truncated_copy` writes the batches below the truncation offset to new files named
``<base>.<suffix>.cleaned`` (the cleaner's temporary name, which a load removes when no swap record names it):

* the ``.log``: bytes ``[0, cut)`` of the old file, copied in the kernel (``copy_file_range``; ``pread``/``write``
  where the file system refuses it), where ``cut`` is the position of the first batch whose last offset is at or
  past the truncation offset (the batch-granular cut :meth:`LogSegment.truncate_to` makes);
* the ``.index`` and ``.timeindex``: the entries :meth:`IndexFile.truncate_to` keeps, followed by a zero tail up to
  ``segment.index.bytes`` (the copy becomes the active segment, which takes appends);
* the ``.txnindex`` (if the old one exists): its entries whose last offset is below the truncation offset.

Every file is fsynced before the function returns; the old files are only read. The copy is opened as a writable
:class:`LogSegment` with the old one's roll clock (restarted when the copy is empty, as an in-place truncation to
empty restarts it). Its cost is one sequential copy of the kept bytes, at most ``segment.bytes``.
"""
from __future__ import annotations

import errno
import os
from collections.abc import Callable

from storage_engine import layout
from storage_engine.config import LogConfig
from storage_engine.errors import StorageIOError
from storage_engine.segment.segment import LogSegment

COPY_CHUNK = 8 * 1024 * 1024        # bytes per copy_file_range/pread call


def cut_position(seg: LogSegment, offset: int) -> int | None:
    """Where truncating ``seg`` to ``offset`` cuts its ``.log``: the position of the first batch whose last offset
    is >= ``offset``, or None when no batch is (the ``.log`` keeps every byte)."""
    found = seg.translate_offset(offset)
    return None if found is None else found[1]


def truncated_copy(seg: LogSegment, offset: int, cut: int, config: LogConfig, suffix: str, now_ms: int) -> LogSegment:
    """Write ``seg``'s files, truncated to ``offset`` (its ``.log`` to ``cut`` bytes), as new files named with
    ``suffix``, fsynced, and open them as a writable segment (see the module docstring)."""
    base = seg.base_offset
    path = lambda s: layout.segment_file(seg.dir, base, s, suffix)  # noqa: E731
    try:
        return _write(seg, offset, cut, config, suffix, now_ms, path)
    except BaseException:
        for s in _SUFFIXES:     # nothing half written is left behind (a load would remove it too)
            try:
                os.remove(path(s))
            except OSError:
                pass
        raise


_SUFFIXES = (layout.LOG_SUFFIX, layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX)


def _write(seg: LogSegment, offset: int, cut: int, config: LogConfig, suffix: str, now_ms: int,
           path: Callable[[str], str]) -> LogSegment:
    base = seg.base_offset
    _copy_prefix(seg.path, path(layout.LOG_SUFFIX), cut)
    index_bytes = config.segment_index_bytes
    for suffix_, index in ((layout.INDEX_SUFFIX, seg.offset_index), (layout.TIME_INDEX_SUFFIX, seg.time_index)):
        kept = index.packed_entries_below(offset)
        _write_file(path(suffix_), kept, max(len(kept), index_bytes - index_bytes % index.ENTRY_SIZE))
    txn_path = path(layout.TXN_INDEX_SUFFIX)
    _remove(txn_path)
    old_txn = seg.txn_index
    if old_txn.exists:
        kept_txns = [t for t in old_txn.all_aborted_txns() if t.last_offset < offset]
        _write_file(txn_path, b"".join(t.encode() for t in kept_txns), 0)
    new = LogSegment.open(seg.dir, base, config, now_ms=now_ms, file_already_exists=True, suffix=suffix)
    new.roll_jitter_ms = seg.roll_jitter_ms
    new.created_ms = seg.created_ms if cut > 0 else now_ms
    new.reload_tail_state()
    return new


def _copy_prefix(src_path: str, dst_path: str, size: int) -> None:
    """``dst_path`` := the first ``size`` bytes of ``src_path`` (created or replaced), fsynced."""
    try:
        src = os.open(src_path, os.O_RDONLY)
    except OSError as exc:
        raise StorageIOError("cannot open log file to copy it", src_path, exc) from exc
    try:
        try:
            dst = os.open(dst_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise StorageIOError("cannot create log file", dst_path, exc) from exc
        try:
            done = 0
            in_kernel = hasattr(os, "copy_file_range")
            while done < size:
                n = min(COPY_CHUNK, size - done)
                if in_kernel:
                    try:
                        got = os.copy_file_range(src, dst, n, done, done)
                    except OSError as exc:
                        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                            raise
                        in_kernel = False
                        continue
                else:
                    data = os.pread(src, n, done)
                    got = os.pwrite(dst, data, done) if data else 0
                if got <= 0:
                    raise StorageIOError(f"the log file ended at {done} bytes while {size} were to be copied",
                                         src_path)
                done += got
            os.fsync(dst)
        except OSError as exc:
            raise StorageIOError("cannot copy log file", dst_path, exc) from exc
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _write_file(path: str, data: bytes, length: int) -> None:
    """``path`` := ``data`` followed by zeros up to ``length`` bytes (created or replaced), fsynced."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if data:
                os.pwrite(fd, data, 0)
            if length > len(data):
                os.ftruncate(fd, length)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageIOError("cannot write index file", path, exc) from exc


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageIOError("cannot remove a leftover file", path, exc) from exc

