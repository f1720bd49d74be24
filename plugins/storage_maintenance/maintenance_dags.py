"""The maintenance DAGs by id, the one list that the run history, the Storage view, the demo and the tests read;
the two forms of their task ids: ``retention``, and ``storage-a.retention`` in the task group of a storage host;
the URIs of their assets (:mod:`.tasks.assets`), which the run history reads.

Plain names with no import, so a program outside Airflow (the demo) can read them without starting it.
"""
from __future__ import annotations

# In the order the demo runs them: flushed and checkpointed logs first, then retention, tiering (copies to the
# object store, then local and remote retention of tiered topics), compaction, the audit and the balance.
MAINTENANCE_DAGS = ("log_checkpoint", "log_flush", "log_retention", "log_tiering", "log_compaction", "log_verify",
                    "log_dir_balance")
# The ones whose dry run the Storage view may trigger (``POST /api/dry-runs``).
DRY_RUN_DAGS = ("log_checkpoint", "log_flush", "log_retention", "log_tiering", "log_compaction")


def step_of(task_id: str) -> tuple[str, str]:
    """(host group, step) of a task id: ``storage-a.retention`` -> ``("storage-a", "retention")``, ``retention`` ->
    ``("", "retention")`` (a store without hosts)."""
    group, _, step = task_id.rpartition(".")
    return group, step


def in_group(group: str, step: str) -> str:
    """The id of ``step``'s task in host group ``group`` (``""``: no group)."""
    return f"{group}.{step}" if group else step


PARTITION_URI_PREFIX = "kafka-log://"
RUN_URI_PREFIX = "kafka-log-maintenance://"


def partition_uri(topic: str, partition: int) -> str:
    """The URI of the asset of a partition: ``kafka-log://<topic>/<partition>``."""
    return f"{PARTITION_URI_PREFIX}{topic}/{partition}"
