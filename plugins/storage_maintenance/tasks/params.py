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
* ``as_of`` (optional ISO date-time; empty = none): act as of this instant instead of the run's own (see
  :func:`run_as_of`); an instant after the run was triggered is refused, since retention would then delete
  what has not expired yet.

**Unknown keys.** Airflow accepts any key in a run's ``conf`` (a key no param declares passes the trigger's
validation untouched), so ``{"dryrun": true}`` would start a run that mutates. Every maintenance operator calls
:func:`check_conf_keys` before anything else: the run's first task fails at once (no retry), naming the
unknown key, the closest declared one and every key the DAG accepts, and no later task runs.

**What "now" is** (:func:`run_as_of`), first match:

1. ``as_of`` in the conf (a field of the trigger form): that instant (``"as_of from the run's conf"``);
2. a run without a data interval (REST API with ``logical_date: null``): its trigger time (``run_after``);
3. a manual run (the trigger form, the REST API, ``airflow dags trigger``): the moment it was triggered
   (``run_after``, which the API server sets when the request arrives), not the logical date the form filled
   in, whose data interval the timetable aligns to the previous schedule boundary (an hourly DAG triggered at
   12:59 would act as of 12:00); ``"trigger time (manual run)"``;
4. otherwise (scheduled runs, backfills, and ``airflow dags test`` / ``dag.test()``, which replay the logical
   date they are given): the data interval end.

The ``as_*`` checkers are public: operators call them on their rendered arguments, because a run can be
created without the form (REST API, CLI, backfill), and a bad value must fail the task at once
(:class:`AirflowFailException`, no retry) with a message naming the value.
"""
from __future__ import annotations

import datetime
import difflib
import logging
from typing import Any

from airflow.sdk import Context, Param
from airflow.sdk.exceptions import AirflowFailException

from storage_engine.errors import StorageError
from storage_engine.layout import MAX_TOPIC_LENGTH

from .hooks import AS_OF_INTERVAL_END, AS_OF_TRIGGER_TIME, AsOf, config_path_without_connection, declared_topics, \
    epoch_ms, iso_ms

log = logging.getLogger(__name__)

# Kafka's Topic.validate as a JSON Schema (see storage_engine.layout.validate_topic).
TOPIC_NAME_SCHEMA = {"type": "string", "pattern": r"^(?!\.{1,2}$)[a-zA-Z0-9._-]+$",
                     "minLength": 1, "maxLength": MAX_TOPIC_LENGTH}
MAP_STRATEGIES = ("auto", "spark", "local")
# Partitions per batch task, measured under `make airflow` (benchmarks/HISTORY.md, "Scheduled maintenance under make airflow"): per-task
# launch cost is a few seconds, retention costs a few ms per partition.
DEFAULT_BATCH_SIZE = 500
DEFAULT_MAX_BATCHES = 40
# An ISO 8601 date-time, the offset optional (read as UTC, the schedules' zone): what the trigger form's date-time
# field and a person typing one send. (JSON Schema's "format: date-time" is not checked without an extra package.)
AS_OF_PATTERN = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$"
AS_OF_MANUAL = "trigger time (manual run)"
# Appended to every maintenance DAG's doc_md (the DAG's page in the UI).
RUN_INPUT_DOC = """
**Trigger input.** A run started by hand (the trigger form, the REST API, `airflow dags trigger`) acts as of the
moment it was triggered, not as of the logical date the form fills in (its interval ends at an earlier schedule
boundary); the form's **Act as of** (`as_of`) names another instant, never one after the trigger. Scheduled runs
and backfills act as of their data interval end. Each task's XCom says which rule chose the instant
(`as_of_source`: `data interval end`, `trigger time (manual run)`, `trigger time (the run has no data
interval)`, `as_of from the run's conf`). A conf key this DAG does not declare (`dryrun` for `dry_run`) fails the
first task at once, naming it and the keys the DAG accepts: nothing else runs.
"""
AS_OF_CONF = "as_of from the run's conf"
# The triggering user Airflow records for `airflow dags test` and `dag.test()` runs: they replay the logical date
# they are given, so they act as of its data interval end like a backfill.
DAG_TEST_USER = "dag_test"


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


def as_instant(value: Any) -> datetime.datetime:
    """An ``as_of`` value: an ISO 8601 date-time (``2026-01-01T12:00:00Z``; without an offset it is UTC)."""
    if isinstance(value, datetime.datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.datetime.fromisoformat(value.strip())
        except ValueError:
            raise AirflowFailException(f"as_of must be an ISO date-time such as 2026-01-01T12:00:00Z, got "
                                       f"{value!r}") from None
    else:
        raise AirflowFailException(f"as_of must be an ISO date-time such as 2026-01-01T12:00:00Z, got {value!r}")
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.timezone.utc)


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


def check_conf_keys(conf: Any, allowed: Any, dag_id: str | None = None) -> None:
    """Refuse a run whose ``conf`` has a key that no param of its DAG declares (a typo such as ``dryrun`` would
    otherwise be ignored and the run would mutate): :class:`AirflowFailException` naming the unknown keys, the
    closest declared one and every key the DAG accepts."""
    if not conf:
        return
    if not isinstance(conf, dict):
        raise AirflowFailException(f"the run's conf must be a JSON object, got {conf!r}")
    accepted = sorted(allowed)
    unknown = sorted(k for k in conf if k not in accepted)
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), accepted, n=1, cutoff=0.6)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise AirflowFailException(
        f"unknown key(s) in the run's conf: {', '.join(hints)}; {dag_id or 'this DAG'} accepts only "
        f"{', '.join(accepted) or 'no key'}. Nothing was done: trigger it again with the right keys")


def run_as_of(context: Context, *, strict: bool = True) -> AsOf:
    """The instant a run acts as of, and which rule chose it (see the module docstring): ``as_of`` from the conf,
    else the trigger time of a run without a data interval or of a manual run, else the data interval end.
    ``strict=False`` (the run report, which must describe even a run whose ``as_of`` was refused) passes over an
    ``as_of`` that is refused to the next rule.

    :raises AirflowFailException: (strict) ``as_of`` is not a date-time, or lies after the run's trigger time"""
    dag_run = context.get("dag_run")
    run_after = getattr(dag_run, "run_after", None)
    params = context.get("params") or {}
    explicit = params.get("as_of") if hasattr(params, "get") else None
    end = context.get("data_interval_end")
    when: datetime.datetime | None
    if explicit not in (None, "") and not strict:
        try:
            return run_as_of(context)
        except AirflowFailException:
            explicit = None
    if explicit not in (None, ""):
        when, source = as_instant(explicit), AS_OF_CONF
        if run_after is not None and when > run_after:
            raise AirflowFailException(
                f"as_of {explicit!r} lies after the moment the run was triggered ({iso_ms(epoch_ms(run_after))}): "
                "retention would delete what has not expired yet; give an instant at or before it")
    elif end is None:
        when, source = run_after, AS_OF_TRIGGER_TIME
    elif (getattr(dag_run, "run_type", None) == "manual" and run_after is not None
          and getattr(dag_run, "triggering_user_name", None) != DAG_TEST_USER):
        when, source = run_after, AS_OF_MANUAL
    else:
        when, source = end, AS_OF_INTERVAL_END
    if when is None:
        raise ValueError("the run has neither a data interval nor a trigger time (run_after) to act as of")
    now_ms = epoch_ms(when)
    return {"now_ms": now_ms, "iso": iso_ms(now_ms), "source": source}


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
        "as_of": Param(None, type=["null", "string"], format="date-time", pattern=AS_OF_PATTERN,
                       title="Act as of",
                       description="Empty: the moment you press Trigger (the form's logical date does not set it). "
                                   "An instant (UTC unless it names an offset) replays the logs as of then; it "
                                   "may not lie after the trigger."),
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
    digest alert for the whole run (see :mod:`storage_maintenance.tasks.run_report`)."""
    return {
        "retries": 2,
        "retry_delay": datetime.timedelta(seconds=retry_delay_s),
        "execution_timeout": datetime.timedelta(minutes=execution_timeout_min),
    }
