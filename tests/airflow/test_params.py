"""Bad trigger parameters are rejected by the DAGs' param schema, on the path a trigger takes, with a clear
message; unknown topics that get past the form (a topic created after parsing) fail at run time."""
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


def test_topics_enum_lists_the_topics_on_disk(retention_dag):
    schema = retention_dag.params.get_param("topics").schema
    assert schema["items"]["enum"] == ["audit", "events"]


def test_valid_conf_passes(retention_dag):
    assert validate_as_trigger(retention_dag, {"topics": ["events"], "dry_run": True, "max_partitions": 5}) == {
        "topics": ["events"], "dry_run": True, "max_partitions": 5}
    assert validate_as_trigger(retention_dag, {}) == {"topics": [], "dry_run": False, "max_partitions": 1000}


@pytest.mark.parametrize("conf, param, reason", [
    ({"topics": ["nope"]}, "topics", "'nope' is not one of ['audit', 'events']"),
    ({"topics": ["../x"]}, "topics", "'../x' is not one of ['audit', 'events']"),
    ({"topics": "events"}, "topics", "'events' is not of type 'array'"),
    ({"topics": ["events", "events"]}, "topics", "['events', 'events'] has non-unique elements"),
    ({"max_partitions": 0}, "max_partitions", "0 is less than the minimum of 1"),
    ({"max_partitions": -3}, "max_partitions", "-3 is less than the minimum of 1"),
    ({"max_partitions": "10"}, "max_partitions", "'10' is not of type 'integer'"),
    ({"max_partitions": 2.5}, "max_partitions", "2.5 is not of type 'integer'"),
    ({"dry_run": "yes"}, "dry_run", "'yes' is not of type 'boolean'"),
    ({"dry_run": "false"}, "dry_run", "'false' is not of type 'boolean'"),
    ({"dry_run": 1}, "dry_run", "1 is not of type 'boolean'"),
])
def test_bad_conf_is_rejected_with_a_clear_message(retention_dag, conf, param, reason):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=re.escape(f"Invalid input for param {param}: {reason}")):
        validate_as_trigger(retention_dag, conf)


def test_trigger_with_bad_conf_creates_no_run_and_touches_nothing(storage, retention_dag):
    from airflow.sdk.exceptions import ParamValidationError

    before = storage.snapshot()
    with pytest.raises(ParamValidationError, match="'nope' is not one of"):
        retention_dag.test(logical_date=T, run_conf={"topics": ["nope"]})
    assert storage.snapshot() == before


@pytest.mark.parametrize("dag_id", ["log_checkpoint", "log_flush"])
def test_checkpoint_and_flush_params(storage, dag_id):
    from airflow.sdk.exceptions import ParamValidationError

    storage.produce("events", 0, old_then_recent(3, 0))
    dag = parse_dag(dag_id)
    assert "max_partitions" not in dag.params
    with pytest.raises(ParamValidationError, match=re.escape("'nope' is not one of ['events']")):
        validate_as_trigger(dag, {"topics": ["nope"]})
    with pytest.raises(ParamValidationError, match=re.escape("'no' is not of type 'boolean'")):
        validate_as_trigger(dag, {"dry_run": "no"})


def test_without_topics_on_disk_the_form_still_rejects_illegal_names(storage):
    from airflow.sdk.exceptions import ParamValidationError

    dag = parse_dag("log_retention")          # the log dirs are still empty
    assert "enum" not in dag.params.get_param("topics").schema["items"]
    assert validate_as_trigger(dag, {"topics": ["ghost"]})["topics"] == ["ghost"]
    for bad in ("../x", "..", "a/b", ""):
        with pytest.raises(ParamValidationError, match="Invalid input for param topics"):
            validate_as_trigger(dag, {"topics": [bad]})


def test_unreadable_config_at_parse_time_keeps_the_dag_importable(storage):
    storage.config_path.write_text("broker:\n  log.segment.bytes: 5\n")
    dag = parse_dag("log_retention")
    assert "log.segment.bytes = 5" in dag.params.get_param("topics").description


def test_unknown_topic_that_passes_the_form_fails_the_run_without_retries(storage):
    dag = parse_dag("log_retention")          # parsed before any topic existed: no enum
    storage.produce("events", 0, old_then_recent(3, 0))
    dag_run = dag.test(logical_date=T, run_conf={"topics": ["ghost"]})
    assert dag_run.state == "failed"
    listing = task_instances(dag_run)[("list_partitions", -1)]
    assert listing.state == "failed"
    assert listing.try_number == 1          # AirflowFailException: a retry cannot make the topic exist
    assert ("list_partitions", -1) not in run_results(dag_run)
