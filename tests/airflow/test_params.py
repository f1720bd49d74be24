"""Trigger parameters: the DAGs' param schema rejects bad values on the path a trigger takes, with a clear
message; the topics param is an optional multi-select of the topics the config declares and does not change
the DAG when topics come and go on disk; unknown topics fail the run at once."""
from __future__ import annotations

import re

import pytest

from .conftest import parse_dag, run_results, task_instances
from .storage_fixtures import T, old_then_recent

pytestmark = pytest.mark.airflow


def validate_as_trigger(dag, conf: dict) -> dict:
    """What a trigger (REST API, UI form, CLI) does: the serialized DAG's params merged with conf, validated."""
    from airflow.serialization.serialized_objects import DagSerialization

    serialized = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    return serialized.params.deep_merge(conf).validate()


@pytest.fixture
def retention_dag(storage):
    storage.produce("events", 0, old_then_recent(3, 0))
    storage.produce("audit", 0, old_then_recent(3, 0))
    return parse_dag("log_retention")


def test_topics_is_an_optional_multi_select_of_the_declared_topics(retention_dag):
    schema = retention_dag.params.get_param("topics").schema
    assert schema["type"] == ["null", "array"]           # optional: the form does not mark it required
    assert schema["examples"] == ["audit", "events"]      # the form's multi-select (the config's topics: section)
    assert "enum" not in schema["items"]


def test_topics_on_disk_do_not_change_the_serialized_dag(storage):
    from airflow.serialization.serialized_objects import DagSerialization

    storage.produce("events", 0, old_then_recent(3, 0))
    before = DagSerialization.serialize_dag(parse_dag("log_retention"))
    storage.produce("brand-new-topic", 0, old_then_recent(3, 0))
    after = DagSerialization.serialize_dag(parse_dag("log_retention"))
    assert before == after


def test_valid_conf_passes(retention_dag):
    assert validate_as_trigger(retention_dag, {"topics": ["events"], "dry_run": True, "batch_size": 5}) == {
        "topics": ["events"], "dry_run": True, "batch_size": 5, "max_batches": 40, "as_of": None}
    assert validate_as_trigger(retention_dag, {}) == {"topics": None, "dry_run": False, "batch_size": 500,
                                                      "max_batches": 40, "as_of": None}
    assert validate_as_trigger(retention_dag, {"as_of": "2026-01-01T12:00:00Z"})["as_of"] == "2026-01-01T12:00:00Z"
    assert validate_as_trigger(retention_dag, {"topics": []})["topics"] == []


@pytest.mark.parametrize("conf, param, reason", [
    ({"topics": ["../x"]}, "topics", "'../x' does not match"),
    ({"topics": [".."]}, "topics", "'..' does not match"),
    ({"topics": "events"}, "topics", "'events' is not of type 'null', 'array'"),
    ({"topics": ["events", "events"]}, "topics", "['events', 'events'] has non-unique elements"),
    ({"batch_size": 0}, "batch_size", "0 is less than the minimum of 1"),
    ({"batch_size": "10"}, "batch_size", "'10' is not of type 'integer'"),
    ({"max_batches": 2.5}, "max_batches", "2.5 is not of type 'integer'"),
    ({"dry_run": "yes"}, "dry_run", "'yes' is not of type 'boolean'"),
    ({"dry_run": 1}, "dry_run", "1 is not of type 'boolean'"),
    ({"as_of": "yesterday"}, "as_of", "'yesterday' does not match"),
    ({"as_of": 1767268800000}, "as_of", "1767268800000 is not of type 'null', 'string'"),
])
def test_bad_conf_is_rejected_with_a_clear_message(retention_dag, conf, param, reason):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=re.escape(f"Invalid input for param {param}: {reason}")):
        validate_as_trigger(retention_dag, conf)


def test_trigger_with_bad_conf_creates_no_run_and_touches_nothing(storage, retention_dag):
    from airflow.sdk.exceptions import ParamValidationError

    before = storage.snapshot()
    with pytest.raises(ParamValidationError, match="does not match"):
        retention_dag.test(logical_date=T, run_conf={"topics": ["a/b"]})
    assert storage.snapshot() == before


@pytest.mark.parametrize("dag_id", ["log_checkpoint", "log_flush", "log_verify", "log_compaction"])
def test_every_maintenance_dag_checks_its_params(storage, dag_id):
    from airflow.sdk.exceptions import ParamValidationError

    storage.produce("events", 0, old_then_recent(3, 0))
    dag = parse_dag(dag_id)
    with pytest.raises(ParamValidationError, match=re.escape("'a b' does not match")):
        validate_as_trigger(dag, {"topics": ["a b"]})
    with pytest.raises(ParamValidationError, match=re.escape("'no' is not of type 'boolean'")):
        validate_as_trigger(dag, {"dry_run": "no"})


def test_unreadable_config_at_parse_time_keeps_the_dag_importable(storage):
    storage.config_path.write_text("broker:\n  log.segment.bytes: 5\n")
    dag = parse_dag("log_retention")
    assert "log.segment.bytes = 5" in dag.params.get_param("topics").description
    assert "examples" not in dag.params.get_param("topics").schema


def test_unknown_topic_fails_the_run_at_once(storage):
    storage.produce("events", 0, old_then_recent(3, 0))
    dag_run = parse_dag("log_retention").test(logical_date=T, run_conf={"topics": ["ghost"]})
    assert dag_run.state == "failed"
    plan = task_instances(dag_run)[("plan_batches", -1)]
    assert plan.state == "failed"
    assert plan.try_number == 1          # AirflowFailException: a retry cannot make the topic exist
    report = run_results(dag_run)[("run_report", -1)]
    (failed,) = report["failed_tasks"]
    assert failed["task_id"] == "plan_batches" and "unknown topic(s) ['ghost']" in failed["error"]


@pytest.mark.parametrize("value, message", [
    ([["events", -1]], "partition must be an integer >= 0, got -1"),
    ([["", 0]], "topic must be a topic name, got ''"),
    ("events-0", "partitions must be a list of [topic, partition] pairs"),
])
def test_batch_arguments_are_checked(value, message):
    from airflow.sdk.exceptions import AirflowFailException

    from storage_maintenance.tasks.params import as_partitions

    with pytest.raises(AirflowFailException, match=re.escape(message)):
        as_partitions(value)
