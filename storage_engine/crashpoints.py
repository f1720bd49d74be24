"""Named steps of the engine's multi-step protocols, where a process can be made to die (``kill -9``).

Every change that takes more than one write or rename (a roll, a cleaner's swap, retention, a checkpoint, the
resolution of a change another process left half done) calls :func:`reached` with the name of the step it just
finished. Normally that is a no-op. With ``STORAGE_ENGINE_CRASH_AT=<step>`` (or ``<step>:<n>``, the n-th time
the step is reached) in its environment, the process prints ``CRASHPOINT <step>`` on stderr and kills itself
with SIGKILL at that step, exactly as an operator's ``kill -9`` or an OOM kill would: no ``finally`` block runs,
no lock is released except by the kernel, nothing is flushed. The torture harness (``make torture``) and the
crash tests use it to die at every step of every protocol; :data:`STEPS` is the list they draw from.
"""
from __future__ import annotations

import os
import signal

ENV_VAR = "STORAGE_ENGINE_CRASH_AT"

# step -> (the protocol it belongs to, what has happened when it is reached)
STEPS: dict[str, tuple[str, str]] = {
    # LocalLog.roll_locked
    "roll.published": ("roll", "the generation is bumped, the old segment not yet sealed"),
    "roll.sealed": ("roll", "the old segment is sealed (trimmed), the new one not yet created"),
    "roll.created": ("roll", "the new segment's files exist, nothing flushed"),
    "roll.flushed": ("roll", "everything below the new segment is flushed"),
    "roll.manifest": ("roll", "the segment manifest names the new segment"),
    # FileRecords.append, LogSegment.append
    "append.torn": ("append", "half of a batch is in the .log (a write cut short)"),
    "append.written": ("append", "a batch is in the .log, its index entries not yet written"),
    # LocalLog.flush_locked
    "flush.synced": ("flush", "segments are fsynced, the new recovery point not yet published"),
    # replace.replace_segments (the cleaner's swap)
    "swap.intent": ("swap", "the swap intent is durable, nothing renamed"),
    "swap.manifest": ("swap", "the segment manifest no longer names the old segments, nothing renamed"),
    "swap.swap-partial": ("swap", "the new .log is .swap, its indexes still .cleaned"),
    "swap.swap-ready": ("swap", "every file of the new segment is .swap"),
    "swap.old-partial": ("swap", "the first old segment is .deleted"),
    "swap.old-deleted": ("swap", "every old segment is .deleted, the .swap not yet renamed"),
    "swap.index-final": ("swap", "the new indexes have their final names, the .log is still .swap"),
    "swap.log-final": ("swap", "the new .log has its final name"),
    "swap.delete-after": ("swap", "an emptied group's segment: its .log is .deleted, its indexes not yet"),
    "swap.done": ("swap", "all renames done, the intent not yet cleared"),
    # rewrite.truncate_segment (a truncation by rewrite: the cleaner's swap of one segment by its kept prefix)
    "rewrite.copied": ("rewrite", "the kept prefix is written to .cleaned files and fsynced, no record written"),
    "rewrite.intent": ("rewrite", "the rewrite's swap record is durable, nothing renamed"),
    "rewrite.swap-partial": ("rewrite", "the new .log is .swap, its indexes still .cleaned"),
    "rewrite.swap-ready": ("rewrite", "every file of the new segment is .swap, the dir fsynced"),
    "rewrite.old-deleted": ("rewrite", "the old segment is .deleted, the .swap not yet renamed"),
    "rewrite.index-final": ("rewrite", "the new indexes have their final names, the .log is still .swap"),
    "rewrite.log-final": ("rewrite", "the new .log has its final name, the dir not yet fsynced"),
    "rewrite.done": ("rewrite", "all renames done and fsynced, the record not yet cleared"),
    # truncation.truncate_to, truncate_fully_locked (the dir's checkpoint entries of the truncated partition)
    "truncation.checkpoint-lowered": ("truncation", "the lowered recovery point is published and the dir's "
                                                    "recovery-point checkpoint entry lowered to it, nothing renamed"),
    "truncation.published": ("truncation", "the truncation is complete and published, the dir's checkpoints not "
                                           "yet written"),
    "truncation.recovery-point-checkpointed": ("truncation", "the recovery-point checkpoint entry is written, the "
                                                             "log-start-offset one not yet"),
    # swap.resolve (another process completing or rolling back a dead cleaner's swap)
    "resolve.partial": ("resolve", "the first rename of a resolution is done"),
    # Log.delete_segments_locked (retention)
    "retention.published": ("retention", "the new log start offset is published, no segment renamed"),
    "retention.manifest": ("retention", "the segment manifest no longer names the doomed segments, none renamed"),
    "retention.partial": ("retention", "the first doomed segment is .deleted"),
    "retention.renamed": ("retention", "every doomed segment is .deleted, the dir not yet fsynced"),
    # truncation.set_log_start_offset_from_remote (remote retention raising a tiered log's start)
    "remote-start.published": ("remote-start", "the raised log start offset is in the partition state, not fsynced"),
    "remote-start.synced": ("remote-start", "the partition state is fsynced, the leader epoch cache not yet cut"),
    # durable.atomic_write (checkpoint files, the clean-shutdown marker, intents)
    "atomic.tmp-written": ("checkpoint", "the temp file is written and fsynced, not yet renamed"),
    "atomic.renamed": ("checkpoint", "the temp file is renamed over the target, the dir not yet fsynced"),
    # dir_checkpoints.checkpoint_dir
    "checkpoint.between-files": ("checkpoint", "the recovery-point checkpoint is written, the log-start one not"),
    # retention.purge_deleted
    "purge.partial": ("purge", "the first expired .deleted file is removed"),
    # view.validate_active_tail
    "view.truncated": ("truncate", "a torn tail is cut from the .log, the indexes not yet truncated"),
    # log.topic_changes (CreateTopics, CreatePartitions, DeleteTopics, delete-topic)
    "topic.create.intent": ("topic-create", "the create's record is durable, nothing else done"),
    "topic.create.configs": ("topic-create", "the topic's configs are stored, no partition created"),
    "topic.create.partition": ("topic-create", "a partition is created with its topic id (:n for the n-th)"),
    "topic.create.done": ("topic-create", "every partition exists, the record not yet cleared"),
    "topic.extend.intent": ("topic-extend", "the add-partitions record is durable, no partition created"),
    "topic.extend.partition": ("topic-extend", "a new partition is created with its topic id (:n for the n-th)"),
    "topic.extend.done": ("topic-extend", "every new partition exists, the record not yet cleared"),
    "topic.delete.intent": ("topic-delete", "the delete's record is durable, no partition deleted"),
    "topic.delete.partition": ("topic-delete", "a partition's folder is -delete (:n for the n-th)"),
    "topic.delete.configs": ("topic-delete", "every partition is deleted, the stored configs dropped"),
    "topic.delete.done": ("topic-delete", "everything deleted, the record not yet cleared"),
    "topic.resolve.partial": ("topic-resolve", "a step of completing a dead process's topic change is done"),
    # loader.load
    "load.resolved": ("load", "temp files and swaps are handled, no segment recovered yet"),
    "load.recovered": ("load", "a segment is recovered, the shared state not yet written"),
    "load.manifest": ("load", "lost segments are recorded and the segment manifest names what the load holds"),
    # storage_engine.tiered (the tiering job: copy, delete, log start raised after remote retention)
    "tier.copy-started": ("tier", "COPY_SEGMENT_STARTED is durable, no object uploaded"),
    "tier.uploaded-part": ("tier", "a part of the segment is uploaded (:n for the n-th), the others not yet"),
    "tier.verified": ("tier", "every object is uploaded and verified, COPY_SEGMENT_FINISHED not yet published"),
    "tier.copy-finished": ("tier", "COPY_SEGMENT_FINISHED is durable"),
    "tier.log-start-raised": ("tier", "the log start offset is raised and checkpointed, no remote segment deleted"),
    "tier.delete-started": ("tier", "DELETE_SEGMENT_STARTED is durable, no object deleted"),
    "tier.objects-deleted": ("tier", "a segment's objects are deleted, DELETE_SEGMENT_FINISHED not yet published"),
    # tiered.remote_log.RemoteLogMetadata.publish (a record of __remote_log_metadata)
    "remote.metadata.appended": ("remote-metadata", "a remote log metadata record is appended, not yet flushed"),
    "remote.metadata.flushed": ("remote-metadata", "a remote log metadata record is flushed, publish not returned"),
    # acl.store.AclStore (CreateAcls, DeleteAcls: the whole ACL file rewritten)
    "acl.tmp-written": ("acl", "the new ACL file is written and fsynced as .tmp, not yet renamed"),
    "acl.renamed": ("acl", "the new ACL file is renamed over the old, the dir not yet fsynced"),
    "acl.synced": ("acl", "the dir is fsynced, the change not yet answered"),
}


def _parse(raw: str | None) -> tuple[str | None, int]:
    if not raw:
        return None, 0
    step, _, nth = raw.partition(":")
    return step, int(nth) if nth.isdigit() and int(nth) > 0 else 1


_target, _remaining = _parse(os.environ.get(ENV_VAR))


def armed(step: str) -> bool:
    """Count a hit of ``step``; True if the process must die at it (after preparing its damage, it calls
    :func:`die`). For a step whose damage is more than stopping, such as a write cut in half."""
    global _remaining
    if _target is None or step != _target:
        return False
    _remaining -= 1
    return _remaining <= 0


def reached(step: str) -> None:
    """Mark ``step`` as done; dies here (SIGKILL) when the environment names it."""
    if _target is not None and step == _target and armed(step):
        die(step)


def die(step: str) -> None:
    try:
        os.write(2, f"CRASHPOINT {step}\n".encode())
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def arm(step: str | None, nth: int = 1) -> None:
    """Set (or with None clear) the step to die at, in this process (tests that fork use the variable)."""
    global _target, _remaining
    if step is not None and step not in STEPS:
        raise ValueError(f"unknown crash step {step!r}; known: {', '.join(STEPS)}")
    _target, _remaining = step, nth
