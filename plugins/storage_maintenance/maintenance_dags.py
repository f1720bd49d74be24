"""The maintenance DAGs by id, the one list that the run history, the Storage view, the demo and the tests read.

Plain names with no import, so a program outside Airflow (the demo) can read them without starting it.
"""
from __future__ import annotations

# In the order the demo runs them: flushed and checkpointed logs first, then retention, compaction, the audit
# and the balance.
MAINTENANCE_DAGS = ("log_checkpoint", "log_flush", "log_retention", "log_compaction", "log_verify",
                    "log_dir_balance")
# The ones whose dry run the Storage view may trigger (``POST /api/dry-runs``).
DRY_RUN_DAGS = ("log_checkpoint", "log_flush", "log_retention", "log_compaction")
