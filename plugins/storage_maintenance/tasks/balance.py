"""Operators of the ``log_dir_balance`` DAG: plan moves off log dirs above a usage threshold, then one task per move.

1. :class:`PlanMovesOperator` measures each log dir (read-only: names and sizes) and plans which partitions to
   move from every dir above the threshold to the least-used one (the engine's
   :func:`storage_engine.jobs.lifecycle.balance_plan`). Its return value is the whole plan (usage before
   and after, for the UI and the run summary); with ``dry_run`` nothing more happens. The plan's ``move_kwargs``
   list goes through a :class:`~storage_maintenance.tasks.compaction.PlanPartOperator` to the mapped move tasks.
2. :class:`MovePartitionOperator` (mapped, one per move: each copies a whole partition) moves one partition while
   it keeps serving (Kafka's alter-log-dirs: a ``-future`` copy, caught up, swapped in crash-safely; see
   :mod:`storage_engine.log.mover`). A move a crashed task left behind is resumed by the next run.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from storage_engine.units import human_bytes

from .hooks import AsOf
from .operators import StorageMaintenanceOperator
from .params import as_dry_run, as_partition, as_positive_int, as_topic, as_topics


def as_threshold(max_used_percent: Any, max_dir_bytes: Any) -> tuple[float | None, int | None]:
    """Exactly one threshold: ``max_dir_bytes`` (an integer >= 0) when given, else ``max_used_percent``."""
    if max_dir_bytes is not None:
        if isinstance(max_dir_bytes, bool) or not isinstance(max_dir_bytes, int) or max_dir_bytes < 0:
            raise AirflowFailException(f"max_dir_bytes must be null or an integer >= 0, got {max_dir_bytes!r}")
        return None, max_dir_bytes
    if isinstance(max_used_percent, bool) or not isinstance(max_used_percent, (int, float)) \
            or not 0 < max_used_percent <= 100:
        raise AirflowFailException(f"max_used_percent must be a number in (0, 100], got {max_used_percent!r}")
    return float(max_used_percent), None


class PlanMovesOperator(StorageMaintenanceOperator):
    """The dry-run plan of the run: dirs, their usage, the moves (see the module docstring).

    :param max_used_percent: move off dirs whose filesystem is used above this percentage
    :param max_dir_bytes: instead, move off dirs holding more than this many bytes of log data (wins when set)
    :param max_moves: at most this many moves per run
    :param topics: only partitions of these topics move; empty = all
    :param dry_run: plan only; no move task runs
    """

    template_fields: Sequence[str] = (*StorageMaintenanceOperator.template_fields, "max_used_percent",
                                      "max_dir_bytes", "max_moves", "topics", "dry_run")

    def __init__(self, *, max_used_percent: Any = 85.0, max_dir_bytes: Any = None, max_moves: Any = 5,
                 topics: str | list[str] | None = None, dry_run: Any = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_used_percent = max_used_percent
        self.max_dir_bytes = max_dir_bytes
        self.max_moves = max_moves
        self.topics = topics
        self.dry_run = dry_run

    def run(self, now_ms: int, context: Context) -> dict:
        percent, dir_bytes = as_threshold(self.max_used_percent, self.max_dir_bytes)
        dry_run = as_dry_run(self.dry_run)
        plan = self.hook.balance_plan(max_used_percent=percent, max_dir_bytes=dir_bytes,
                                      max_moves=as_positive_int("max_moves", self.max_moves),
                                      topics=as_topics(self.topics))
        for d in plan["dirs"]:
            self.log.info("%s: %s usage %s (limit %s)%s -> %s after the moves", d["log_dir"], plan["measure"],
                          d["usage"], d["limit"], " OVER" if d["over"] else "", d["usage_after"])
        for m in plan["moves"]:
            self.log.info("%s %s-%s (%s) from %s to %s", "would move" if dry_run else "moving", m["topic"],
                          m["partition"], human_bytes(m["size_bytes"]), m["from_dir"], m["to_dir"])
        for d in plan["still_over"]:
            self.log.warning("%s stays above the limit: no partition fits another dir", d)
        plan["dry_run"] = dry_run
        plan["move_kwargs"] = [] if dry_run else [
            {"topic": m["topic"], "partition": m["partition"], "to_dir": m["to_dir"], "from_dir": m["from_dir"],
             "move_label": f"{m['topic']}-{m['partition']}"} for m in plan["moves"]]
        plan["online_dirs"] = [d["log_dir"] for d in plan["dirs"] if d["status"] == "online"]
        return plan

    def summary(self, result: dict, when: AsOf) -> str:
        verb = "planned (dry run)" if result["dry_run"] else "planned"
        return (f"balance as of {when['iso']}: {len(result['moves'])} move(s) {verb}"
                + (f"; still over the limit: {', '.join(result['still_over'])}" if result["still_over"] else "")
                + (f"; moves already in progress: {', '.join(result['in_progress'])}" if result["in_progress"]
                   else ""))


class MovePartitionOperator(StorageMaintenanceOperator):
    """Move one partition to another log dir while it keeps serving (mapped, one per planned move).

    :param topic, partition: the partition (mapped)
    :param to_dir: the target log dir
    :param from_dir: where the plan found it (informative: the move starts from wherever it is now)
    :param move_label: the map index shown in the UI
    """

    def __init__(self, *, topic: str, partition: int, to_dir: str, from_dir: str | None = None,
                 move_label: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topic = topic
        self.partition = partition
        self.to_dir = to_dir
        self.from_dir = from_dir
        self.move_label = move_label

    def run(self, now_ms: int, context: Context) -> dict:
        topic, partition = as_topic(self.topic), as_partition(self.partition)
        if not isinstance(self.to_dir, str) or not self.to_dir:
            raise AirflowFailException(f"to_dir must be a log dir, got {self.to_dir!r}")
        result = self.hook.move_partition(topic, partition, self.to_dir, now_ms)
        result["nothing_to_do"] = not result["committed"]
        return result

    def summary(self, result: dict, when: AsOf) -> str:
        return (f"moved {result['topic']}-{result['partition']} from {result['source_dir']} to "
                f"{result['target_dir']} as of {when['iso']}: {human_bytes(result['bytes_copied'])} copied in "
                f"{result['rounds']} round(s) ({human_bytes(result['final_bytes'])} while writers waited)"
                f"{', resuming an earlier copy' if result['resumed'] else ''}, {result['duration_s']} s")
