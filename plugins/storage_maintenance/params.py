"""Trigger-form parameters of the maintenance DAGs (JSON Schema, validated by the form and on every trigger).

* ``dry_run`` (boolean, default false): report, change nothing.
* ``topics`` (array of topic names, default empty = every topic): the items' ``enum`` lists the topics whose
  partition folders exist in the configured log dirs when the DAG file is parsed, so the form offers them and
  rejects any other name ("'nope' is not one of [...]"). The listing reads folder names only (no log is
  opened). The config used at parse time is ``$STORAGE_ENGINE_CONFIG`` or the engine default: a DAG file may
  not look up Airflow connections while it is parsed. If the config cannot be read, or no topic exists yet,
  the schema falls back to Kafka's topic-name rule, and the operators reject unknown topics when they run.
* ``max_partitions`` (retention only; integer >= 1, default 1000): the most mapped retention tasks one run may
  start.
"""
from __future__ import annotations

import logging

from airflow.sdk import Param

from storage_engine.config import load_config
from storage_engine.errors import StorageError
from storage_engine.layout import MAX_TOPIC_LENGTH

from .hooks import config_path_without_connection, topics_on_disk

log = logging.getLogger(__name__)

# Kafka's Topic.validate as a JSON Schema (see storage_engine.layout.validate_topic).
_TOPIC_NAME_SCHEMA = {"type": "string", "pattern": r"^(?!\.{1,2}$)[a-zA-Z0-9._-]+$",
                      "minLength": 1, "maxLength": MAX_TOPIC_LENGTH}


def known_topics() -> tuple[list[str], str | None]:
    """(topics on disk, None), or ([], why not) when the config cannot be read at parse time."""
    path = config_path_without_connection()
    try:
        return topics_on_disk(load_config(path)), None
    except (StorageError, OSError) as exc:
        log.warning("cannot list topics for the trigger form from %s: %s", path, exc)
        return [], f"{type(exc).__name__}: {exc}"


def maintenance_params(*, max_partitions: bool = False) -> dict[str, Param]:
    """``params`` for a maintenance DAG; ``max_partitions=True`` adds the retention fan-out limit."""
    topics, problem = known_topics()
    if topics:
        item_schema = {"type": "string", "enum": topics}
        topics_doc = f"Only these topics; empty means all. Topics found at parse time: {', '.join(topics)}."
    else:
        item_schema = dict(_TOPIC_NAME_SCHEMA)
        topics_doc = ("Only these topics; empty means all. No topic list is available "
                      f"({problem or 'no partition folders in the log dirs yet'}); unknown topics fail the run.")
    params = {
        "dry_run": Param(False, type="boolean", title="Dry run",
                         description="Report what would be done; change nothing on disk."),
        "topics": Param([], type="array", items=item_schema, uniqueItems=True, title="Topics",
                        description=topics_doc),
    }
    if max_partitions:
        params["max_partitions"] = Param(
            1000, type="integer", minimum=1, title="Max partitions",
            description="Fail instead of starting more than this many mapped retention tasks in one run.")
    return params
