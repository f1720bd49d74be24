"""Objects left by interrupted runs, found and deleted so that after a run no object is untracked.

Three kinds, per partition (the caller holds the partition's tiering claim, so no copy of it runs meanwhile):

* a copy that never finished (``COPY_SEGMENT_STARTED`` without ``FINISHED``: the run died or the store failed
  during the upload): ``DELETE_SEGMENT_STARTED``, its objects deleted, ``DELETE_SEGMENT_FINISHED``, as Kafka's
  ``RemoteLogManager`` cleans up a failed copy;
* a deletion that never finished (``DELETE_SEGMENT_STARTED`` without ``FINISHED``): its objects deleted again
  (deleting a missing object is no error), then ``DELETE_SEGMENT_FINISHED``;
* objects under the partition's key prefix (``<prefix><topic>-<topic id>/<partition>/``) that no live segment
  names (no metadata at all, or a segment whose deletion finished): deleted; and multipart uploads under it that
  never completed (a process killed during the upload of a large part), aborted. Every copy publishes
  ``COPY_SEGMENT_STARTED`` before its first upload, and no other run tiers the partition meanwhile, so a copy
  in progress is never taken for one of these. An upload the dead process had in flight may still land after
  its segment's objects were deleted: the run that closes such a copy leaves the next run a listing to make
  (:meth:`~storage_engine.tiered.locks.TieringClaim.owe_sweep`), which finds and deletes it.
"""
from __future__ import annotations

import uuid

from storage_engine.log.log import Log
from storage_engine.tiered import keys as remote_keys
from storage_engine.tiered import metadata as md
from storage_engine.tiered.context import TierContext
from storage_engine.tiered.locks import TieringClaim

def clean(ctx: TierContext, log: Log, tid: uuid.UUID | None, *, sweep: bool = False,
          claim: TieringClaim | None = None) -> dict:
    """Clean one partition's orphans (module docstring); what was (with ``dry_run``: would be) deleted.

    The partition's objects are listed only when the metadata shows a copy or deletion left unfinished, or with
    ``sweep``: every object is announced by ``COPY_SEGMENT_STARTED`` before it is uploaded, so an interrupted run
    always leaves such a state, and a run over partitions with nothing unfinished lists nothing (its cost grows
    with the segments to copy, not with the partitions). ``sweep`` also finds objects no record announced (put
    there behind the store's back, or whose metadata was lost). ``claim`` (held): the next run owes a listing
    after this one closed an unfinished copy (an upload its dead process had in flight may land after the
    deletion), and this run lists if the previous one said so."""
    empty = {"orphan_segments": 0, "orphan_objects": 0, "orphans": [], "orphan_keys": [], "orphan_uploads": 0}
    if tid is None:
        return empty
    unfinished = ctx.segments(log, tid, states=(md.COPY_SEGMENT_STARTED, md.DELETE_SEGMENT_STARTED))
    owed = claim is not None and claim.sweep_pending()
    if not unfinished and not sweep and not owed:
        return empty
    found = [{"segment_id": ctx.segment_id_text(s), "start_offset": s.start_offset, "end_offset": s.end_offset,
              "state": md.SEGMENT_STATES.get(s.state, str(s.state))} for s in unfinished]
    if not ctx.dry_run:
        for seg in unfinished:
            ctx.delete_objects(seg, started=seg.state == md.DELETE_SEGMENT_STARTED)
    live = {s.segment_id for s in ctx.segments(log, tid, states=(md.COPY_SEGMENT_FINISHED,))}
    if ctx.dry_run:     # the unfinished ones are not deleted yet: their objects are counted above
        live |= {s.segment_id for s in unfinished}
    prefix = ctx.partition_prefix(log, tid)
    strays = []
    for obj in ctx.store.list(prefix):
        parts = remote_keys.parse_key(obj.key, ctx.settings.key_prefix)
        if parts is not None and parts.segment_id in live:
            continue
        strays.append(obj.key)
    if strays and not ctx.dry_run:
        ctx.store.delete(strays)
    # A multipart upload cut short (a part of 8 MiB or more, its process killed) is no object but takes space.
    aborted = (len(ctx.store.incomplete_uploads(prefix)) if ctx.dry_run
               else ctx.store.abort_incomplete_uploads(prefix))
    if claim is not None and not ctx.dry_run:
        claim.owe_sweep(any(s.state == md.COPY_SEGMENT_STARTED for s in unfinished))
    return {"orphan_segments": len(unfinished), "orphan_objects": len(strays), "orphans": found,
            "orphan_keys": strays[:20], "orphan_uploads": aborted}
