"""Log.read_slice with the shared generation its caller read (the broker's fetch on the event loop reads the
partition state once, for its status, and passes the generation on): bytes verified at one generation are served
from the file only at that generation; a generation the caller read before a truncation never reuses them."""
from __future__ import annotations

import pytest

from storage_engine.segment.file_slice import FileSlice
from storage_engine.segment.slice_read import WouldBlock, nonblocking

from ..helpers import recs

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def _close(data) -> None:
    if data is not None and isinstance(data.slice, FileSlice):
        data.slice.close()


def test_the_generation_passed_in_is_the_one_the_verified_marks_are_matched_against(logs):
    log = logs()
    for i in range(40):
        log.append_records(recs(*[f"v{i}-{j}-" + "x" * 2000 for j in range(20)], timestamp=T0))
    end = log.log_end_offset
    head = log.read_slice(0, 1)              # one batch, checked; the next read starts where it ended
    assert head is not None and 0 < head.next_offset < end
    start = head.next_offset
    _close(head)
    first = log.read_slice(start, 1 << 30)   # checked: its bytes become a verified range of the file
    assert first is not None and first.next_offset == end
    _close(first)
    shared = log.lock.read_state().generation
    with nonblocking():                      # verified bytes only, never a check or a wait
        for generation in (None, shared):
            again = log.read_slice(start, 1 << 30, generation=generation)
            assert again is not None and isinstance(again.slice, FileSlice)
            assert (again.position, len(again.slice), again.next_offset) == (first.position, len(first), end)
            _close(again)
        # a generation other than the file's mark's (as one read before a truncation would be): the mark is not
        # used, so the bytes would have to be checked again, which the event loop refuses
        with pytest.raises(WouldBlock, match="not verified"):
            log.read_slice(start, 1 << 30, generation=shared + 1)
    # the thread path reads the generation itself and serves them
    checked = log.read_slice(start, 1 << 30)
    assert checked is not None and (checked.position, checked.next_offset) == (first.position, end)
    _close(checked)
