"""Surviving mutants that are not equivalent but that no test here can kill, each with the cause.

They count against the score like any survivor; listing them only says why each is left (an ``fsync`` of a
directory that matters only on power loss, an OS failure this machine cannot provoke, ...). A survivor matches
an entry as an equivalent does (module, function, the changed lines); ``make mutation`` prints each survivor
with its cause, or as unexplained, and lists entries that matched nothing so that stale ones are removed.
MUTATION.md gives the same list for readers (``python -m mutation --list-survivors``).
"""
from __future__ import annotations

from .equivalent import Equivalent as Explained

KNOWN_SURVIVORS: tuple[Explained, ...] = (
    Explained('storage_engine.log.log', 'Log._roll_locked',
              'raise StorageError(f"cannot roll {self.name}: a segment with base offset {new_base} already exists")',
              'raise StorageError(None)',
              "A guard no test reaches: a roll goes to max(base, LEO), and the active segment's base is at most the log end, so only a view out of step with the files (an I/O failure between a roll's steps) could raise it; the message is not checked."),
    Explained('storage_engine.log.log', 'Log._roll_locked',
              'raise StorageError(f"cannot roll {self.name} to offset {new_base}, below the active segment base "\nf"{active.base_offset}")',
              'raise StorageError(None)',
              "A guard no test reaches: a roll goes to max(base, LEO), and the active segment's base is at most the log end, so only a view out of step with the files (an I/O failure between a roll's steps) could raise it; the message is not checked."),
    Explained('storage_engine.log.truncation', 'truncate_to',
              'log.producer_state.delete_snapshots_outside(-1, offset)',
              'log.producer_state.delete_snapshots_outside(+1, offset)',
              "Only a producer snapshot file at offset 0 tells the two lower bounds apart (kept with -1, deleted with +1), and no test leaves one there before a truncation: a gap in the tests, not an equivalent."),
    Explained('storage_engine.log.truncation', 'delete_segment_files',
              'def <f>(log: LogHandle, seg: LogSegment, now: int, sync: bool = True, *,',
              'def <f>(log: LogHandle, seg: LogSegment, now: int, sync: bool = False, *,',
              'Only whether the log dir is fsynced after each rename or once after all of them: no file, name or content differs; it matters only on power loss, which no test on a running machine observes.'),
    Explained('storage_engine.log.truncation', 'delete_segments_locked',
              'delete_segment_files(log, seg, now, sync=False)',
              'delete_segment_files(log, seg, now, )',
              'Only whether the log dir is fsynced after each rename or once after all of them: no file, name or content differs; it matters only on power loss, which no test on a running machine observes.'),
    Explained('storage_engine.log.truncation', 'delete_segments_locked',
              'delete_segment_files(log, seg, now, sync=False)',
              'delete_segment_files(log, seg, now, sync=True)',
              'Only whether the log dir is fsynced after each rename or once after all of them: no file, name or content differs; it matters only on power loss, which no test on a running machine observes.'),
    Explained('storage_engine.log.truncation', 'delete_segments_locked',
              'if following is not None and following > log.log_start_offset:',
              'if following is not None or following > log.log_start_offset:',
              "Differs only when the segments given end with the active one while a later segment exists, which no caller does (retention and delete-records pass a prefix of the segment list): outside the function's contract."),
)
