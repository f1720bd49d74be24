"""Parameters of the maintenance DAGs: the trigger-form schema, the checks every operator applies again, and
the ``default_args`` every maintenance DAG shares.

Trigger-form params (JSON Schema, validated by the form and on every trigger, REST API and CLI included):

* ``dry_run`` (boolean, default false): report, change nothing.
* ``topics`` (optional list of topic names; empty or null = every topic): the form offers the topics the
  storage config declares (its ``topics:`` section) as a multi-select; any legal topic name passes the
  schema and an unknown one fails the run at once. Nothing is read from the log dirs at parse time, so the
  DAG's version does not change when topics come and go on disk.
* ``batch_size`` (batched DAGs): partitions per task; ``max_batches`` caps the number of tasks (the batch
  grows instead).

The ``as_*`` checkers are public: operators call them on their rendered arguments, because a run can be
created without the form (REST API, CLI, backfill), and a bad value must fail the task at once
(:class:`AirflowFailException`, no retry) with a message naming the value.
"""
from __future__ import annotations

import datetime
import logging
from typing import Any

from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException

from storage_engine.errors import StorageError
from storage_engine.layout import MAX_TOPIC_LENGTH

from .hooks import config_path_without_connection, declared_topics

log = logging.getLogger(__name__)

# Kafka's Topic.validate as a JSON Schema (see storage_engine.layout.validate_topic).
TOPIC_NAME_SCHEMA = {"type": "string", "pattern": r"^(?!\.{1,2}$)[a-zA-Z0-9._-]+$",
                     "minLength": 1, "maxLength": MAX_TOPIC_LENGTH}
MAP_STRATEGIES = ("auto", "spark", "local")
# Partitions per batch task, measured under `make airflow` (benchmarks/HISTORY.md, "Scheduled maintenance under make airflow"): per-task
# launch cost is a few seconds, retention costs a few ms per partition.
DEFAULT_BATCH_SIZE = 500
DEFAULT_MAX_BATCHES = 40


# -- checks -------------------------------------------------------------------------------------------------

def as_dry_run(value: Any) -> bool:
    if not isinstance(value, bool):
        raise AirflowFailException(f"dry_run must be true or false, got {value!r} ({type(value).__name__})")
    return value


def as_topics(value: Any) -> list[str] | None:
    """``None``/``[]`` mean every topic; otherwise a list of topic names."""
    if value is None or value == [] or value == ():
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise AirflowFailException(f"topics must be a list of topic names, got {value!r}")
    return list(value)


def as_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AirflowFailException(f"{name} must be an integer >= 1, got {value!r}")
    return value


def as_topic(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise AirflowFailException(f"topic must be a topic name, got {value!r}")
    return value


def as_partition(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AirflowFailException(f"partition must be an integer >= 0, got {value!r}")
    return value


def as_map_strategy(value: Any) -> str:
    if value not in MAP_STRATEGIES:
        raise AirflowFailException(f"map_strategy must be one of {list(MAP_STRATEGIES)}, got {value!r}")
    return value


def as_partitions(value: Any) -> list[tuple[str, int]]:
    """A batch's partitions, ``[[topic, partition], ...]`` (or dicts with those keys)."""
    if not isinstance(value, (list, tuple)):
        raise AirflowFailException(f"partitions must be a list of [topic, partition] pairs, got {value!r}")
    out = []
    for item in value:
        if isinstance(item, dict):
            item = (item.get("topic"), item.get("partition"))
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise AirflowFailException(f"a batch entry must be [topic, partition], got {item!r}")
        out.append((as_topic(item[0]), as_partition(item[1])))
    return out


# -- the trigger form ---------------------------------------------------------------------------------------

def known_topics() -> tuple[list[str], str | None]:
    """(topics the config declares, None), or ([], why not) when the config cannot be read at parse time."""
    path = config_path_without_connection()
    try:
        return declared_topics(path), None
    except (StorageError, OSError) as exc:
        log.warning("cannot read the topics of %s for the trigger form: %s", path, exc)
        return [], f"{type(exc).__name__}: {exc}"


def maintenance_params(*, batches: bool = False) -> dict[str, Param]:
    """``params`` of a maintenance DAG; ``batches=True`` adds ``batch_size`` and ``max_batches``."""
    topics, problem = known_topics()
    schema: dict[str, Any] = {"type": ["null", "array"], "items": dict(TOPIC_NAME_SCHEMA), "uniqueItems": True}
    if topics:
        schema["examples"] = topics
        doc = ("Only these topics; empty means all. Listed: the topics the storage config declares; any other "
               "existing topic may be given through the API.")
    else:
        doc = ("Only these topics, one per line; empty means all. "
               + (f"The config could not be read ({problem}). " if problem else "") + "Unknown topics fail the run.")
    params = {
        "dry_run": Param(False, type="boolean", title="Dry run",
                         description="Report what would be done; change nothing on disk."),
        "topics": Param(None, **schema, title="Topics", description=doc),
    }
    if batches:
        params["batch_size"] = Param(
            DEFAULT_BATCH_SIZE, type="integer", minimum=1, title="Batch size",
            description="Partitions per task (each partition is isolated inside its batch).")
        params["max_batches"] = Param(
            DEFAULT_MAX_BATCHES, type="integer", minimum=1, title="Max batches",
            description="At most this many batch tasks (plus one per log dir): above, batches grow instead.")
    return params


def maintenance_default_args(*, retry_delay_s: int = 30, execution_timeout_min: int = 30) -> dict:
    """``default_args`` of every maintenance DAG: two retries for errors that may pass (errors no retry can
    fix fail at once), a short delay, no per-task alert: each run ends with ``run_report``, which sends one
    digest alert for the whole run (see :mod:`storage_maintenance.report`)."""
    return {
        "retries": 2,
        "retry_delay": datetime.timedelta(seconds=retry_delay_s),
        "execution_timeout": datetime.timedelta(minutes=execution_timeout_min),
    }
