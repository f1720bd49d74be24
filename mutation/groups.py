"""The scope of ``make mutation``: which engine modules are mutated, and which tests judge each group of them.

A group is one mutmut run. Its modules are mutated; its tests are the ones that pin those modules (the mirror
test files plus the few that drive them end to end). mutmut then runs, for each mutant, only those tests of
the group that called the mutated function during a clean pass, fastest first, stopping at the first failure.
So the test list decides both what can kill a mutant and what a survivor costs: a record-codec function is
called by nearly every engine test, which is why each group names its own tests rather than using the suite.
"""
from __future__ import annotations

from dataclasses import dataclass

ENGINE_TESTS = "tests/storage_engine"


@dataclass(frozen=True)
class Group:
    name: str
    modules: tuple[str, ...]    # repository-relative paths of the files to mutate
    tests: tuple[str, ...]      # pytest selection: files or node ids, repository-relative
    mutants: tuple[str, ...] = ()   # mutmut name globs to run (empty: every mutant of the modules) ...
    functions: tuple[str, ...] = ()  # ... or only the mutants of these functions, "path:func" / "path:Class.method"
    pure_python: bool = True    # STORAGE_ENGINE_PURE_PYTHON=1: the Python twins of the compiled kernels run

    def mutant_globs(self) -> tuple[str, ...]:
        """What to pass to ``mutmut run``: explicit globs, or one per listed function (mutmut's names are
        ``<module>.x_<func>__mutmut_<n>`` and ``<module>.x\u01c1<Class>\u01c1<method>__mutmut_<n>``)."""
        globs = list(self.mutants)
        for spec in self.functions:
            path, _, func = spec.partition(":")
            module = path[:-len(".py")].replace("/", ".")
            cls, _, method = func.rpartition(".")
            mangled = f"x\u01c1{cls}\u01c1{method}" if cls else f"x_{func}"
            globs.append(f"{module}.{mangled}__mutmut_*")
        return tuple(globs)


def _t(*names: str) -> tuple[str, ...]:
    return tuple(f"{ENGINE_TESTS}/{n}" for n in names)


# Least likely to move first: each group runs on its own, in this order.
GROUPS: tuple[Group, ...] = (
    Group("checkpoint",
          ("storage_engine/segment/checkpoint.py",),
          _t("segment/test_checkpoint.py", "segment/test_checkpoint_rules.py")),
    Group("index",
          ("storage_engine/segment/index_file.py", "storage_engine/segment/offset_index.py",
           "storage_engine/segment/time_index.py"),
          _t("segment/test_offset_index.py", "segment/test_time_index.py", "segment/test_index_rules.py")),
    Group("retention",
          ("storage_engine/maintenance/retention.py",),
          _t("maintenance/test_retention.py", "maintenance/test_retention_rules.py")),
    Group("cleaner_manager",
          ("storage_engine/maintenance/cleaner_manager.py",),
          _t("maintenance/test_cleaner_manager.py", "maintenance/test_cleaner_manager_rules.py")),
    Group("record",
          ("storage_engine/record/records.py", "storage_engine/record/record_batch.py",
           "storage_engine/record/legacy_records.py"),
          _t("record/test_records.py", "record/test_legacy_records.py", "record/test_records_rules.py",
             # the malformed-section table of the differential tests: exact messages and positions
             "record/test_speedups.py::test_malformed_sections",
             "record/test_speedups.py::test_malformed_record_inside_a_batch_names_batch")),
    Group("segment",
          ("storage_engine/segment/segment.py", "storage_engine/segment/recovery.py",
           "storage_engine/segment/checked_read.py", "storage_engine/segment/file_records.py"),
          # Kafka's LogTest roll rules and LogLoaderTest recovery/index-rebuild cases drive segments through the log
          _t("segment/test_segment.py", "segment/test_segment_rules.py", "segment/test_file_records.py",
             "segment/test_recovery_walk.py", "log/test_log.py", "log/test_loader.py",
             # recovery replays each batch into the producer state and rebuilds the .txnindex
             "log/test_transactions.py")),
    # The log's decisions: append validation (validator, appends), truncation, and when the active segment rolls.
    # The rest of log.py hands off (locking, publishing, describe), reads.py filters fetches and segments.py is the
    # segment map: not decision points of the list above, and not mutated.
    Group("log",
          ("storage_engine/log/appends.py", "storage_engine/log/truncation.py", "storage_engine/log/validator.py",
           "storage_engine/log/local_log.py"),
          # producer state, transactions and isolation levels go through the log and its validator
          _t("log/test_log.py", "log/test_log_rules.py", "log/test_transactions.py",
             # the dir's checkpoint entries a truncation writes
             "log/test_truncation_checkpoints.py"),
          mutants=("storage_engine.log.appends.*", "storage_engine.log.truncation.*",
                   "storage_engine.log.validator.*"),
          functions=("storage_engine/log/local_log.py:LocalLog.max_segment_ms",
                     "storage_engine/log/local_log.py:LocalLog.maybe_roll",
                     "storage_engine/log/local_log.py:LocalLog.roll_locked",
                     "storage_engine/log/local_log.py:LocalLog.delete_segment_files")),
    Group("loader",
          ("storage_engine/log/loader.py",),
          # Kafka's LogLoaderTest transaction-index and snapshot recovery cases live with the transaction tests
          _t("log/test_loader.py", "log/test_loader_rules.py", "log/test_transactions.py")),
    Group("cleaner",
          ("storage_engine/maintenance/cleaner.py", "storage_engine/maintenance/txn_cleaning.py",
           "storage_engine/maintenance/offset_map.py", "storage_engine/maintenance/record_filter.py"),
          _t("maintenance/test_cleaner.py", "maintenance/test_cleaner_rules.py", "maintenance/test_cleaner_txn.py",
             "maintenance/test_record_filter.py",
             # the key map's limits and Robin Hood layout, the record filter's edges, under both implementations
             "maintenance/test_offset_map_rules.py", "maintenance/test_record_filter_rules.py",
             # the key map read from the Spark job's Parquet layout, written here with pyarrow (no JVM)
             "maintenance/test_key_map_files.py",
             # CleanedTransactionMetadata and checkBatchRetention one batch at a time
             "maintenance/test_txn_cleaning_rules.py",
             # Kafka's OffsetMapTest, kept with the cleaner manager's tests
             *(f"maintenance/test_cleaner_manager.py::test_offset_map_{name}" for name in
               ("basic_validation", "get_when_full", "clear_and_latest_offset", "utilization_and_capacity")))),
)

# `make test` runs this one: the mutants of one small function, judged by its mirror tests. Seconds, and it goes
# through every step of a real run (copy, mutate, clean pass, forced failure, mutants, results, table).
SMOKE = Group("smoke",
              ("storage_engine/segment/checkpoint.py",),
              _t("segment/test_checkpoint.py"),
              mutants=("storage_engine.segment.checkpoint.x__java_int__mutmut_*",))

# The same modules with the compiled kernels loaded, for the functions that hand work to them: a mutant there counts
# as detected if the pure-Python run or this one detects it (the suite runs both: test_speedups.py and the
# differential tests compare them), since each run takes only one side of the "kernels loaded?" branch.
KERNEL_GROUPS: tuple[Group, ...] = (
    Group("segment-kernels",
          ("storage_engine/segment/recovery.py", "storage_engine/segment/file_records.py"),
          _t("segment/test_segment.py", "segment/test_segment_rules.py", "segment/test_file_records.py",
             "segment/test_recovery_walk.py", "log/test_log.py", "log/test_loader.py",
             # recovery replays each batch into the producer state and rebuilds the .txnindex
             "log/test_transactions.py"),
          functions=("storage_engine/segment/recovery.py:recover_segment",
                     "storage_engine/segment/recovery.py:_recover_compiled",
                     "storage_engine/segment/recovery.py:_rewrite_index",
                     "storage_engine/segment/file_records.py:walk_valid_batches",
                     "storage_engine/segment/file_records.py:walk_batches"),
          pure_python=False),
    Group("cleaner-kernels",
          ("storage_engine/maintenance/offset_map.py", "storage_engine/maintenance/record_filter.py"),
          _t("maintenance/test_cleaner.py", "maintenance/test_cleaner_txn.py", "maintenance/test_record_filter.py",
             "maintenance/test_offset_map_rules.py", "maintenance/test_record_filter_rules.py"),
          functions=("storage_engine/maintenance/record_filter.py:map_batch",
                     "storage_engine/maintenance/record_filter.py:filter_batch",
                     "storage_engine/maintenance/record_filter.py:_compiled_result",
                     "storage_engine/maintenance/offset_map.py:InProcessOffsetMap.put_hash",
                     "storage_engine/maintenance/offset_map.py:InProcessOffsetMap.get_hash",
                     "storage_engine/maintenance/offset_map.py:SortedHashOffsetMap.get",
                     "storage_engine/maintenance/offset_map.py:SortedHashOffsetMap.get_many"),
          pure_python=False),
)
# A kernel group runs right after the pure group of the same modules (`--only segment` runs both).
KERNELS_OF = {"segment": "segment-kernels", "cleaner": "cleaner-kernels"}

BY_NAME = {g.name: g for g in GROUPS + KERNEL_GROUPS}
