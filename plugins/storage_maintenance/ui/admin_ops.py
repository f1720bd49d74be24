"""What the console's admin actions (:mod:`.admin`) do, apart from the web: producing a record through the engine's
append, and the changes the running broker owns, made through its Kafka API as any Kafka client makes them.

**Who owns what.** Records are appended through the engine as ``python -m storage_engine produce`` appends them:
any number of processes share the log dirs, and the broker serves what another process appended. Topics, topic
configs and consumer groups are the broker's: it holds the topic catalog and every group's state and committed
offsets in memory, reading ``__consumer_offsets`` only when it starts. Offsets or a group tombstone appended to
that topic beside a running broker would be answered with the old offsets until its next start, and then come
back or not depending on the order of the records; a topic created behind its back would not be in its catalog.
So creating a topic, changing its configs, resetting a group's offsets and deleting a group go to the broker
that runs on these log dirs (the listener's status file names its listeners), as CreateTopics,
IncrementalAlterConfigs, ListOffsets, DescribeGroups, OffsetCommit and DeleteGroups, the requests Kafka's own
``kafka-topics``, ``kafka-configs`` and ``kafka-consumer-groups`` send; with no broker running they are refused
with that reason (nothing would read the change before the next start, and a start while the console wrote would
race it). The broker applies Kafka's rules: the engine's config checks (INVALID_CONFIG naming the key), offsets
only for a group without members (Kafka's UNKNOWN_MEMBER_ID), deletion only of an empty group (NON_EMPTY_GROUP).
The console checks the same before asking (the config keys with the engine's rules; the group's state), so a
refusal names the reason before anything is sent.

Offset resets are computed first (:func:`reset_preview`: earliest, latest, a timestamp or an offset, each
partition's current and new offset) and committed exactly as previewed (:func:`reset_offsets`), each offset
checked to lie within the partition's log now.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from storage_engine.config import StorageConfig

CLIENT_ID = "storage-console"
REQUEST_TIMEOUT_MS = 15_000
RESET_TO = ("earliest", "latest", "timestamp", "offset")
EMPTY_STATES = ("Empty", "Dead")


class AdminError(Exception):
    """An admin action refused or failed, with the HTTP status it answers (409: the state forbids it now, 422:
    the request or the broker's answer names what is wrong) and the reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


# -- producing through the engine ------------------------------------------------------------------------------

def produce(config: StorageConfig, topic: str, partition: int, key: bytes | None, value: bytes | None,
            headers: list[tuple[str, bytes]]) -> dict:
    """Append one record to an existing partition through the engine (:func:`storage_engine.jobs.partition.produce`:
    the topic's checks first, as ``python -m storage_engine produce``). Returns its offset."""
    from storage_engine.jobs.partition import produce as append

    return append(config, topic, partition, [(key, value, headers)])


# -- the broker's Kafka API ------------------------------------------------------------------------------------

def bootstrap(config: StorageConfig) -> str:
    """The address of the broker serving these log dirs (a PLAINTEXT listener from its status file); AdminError
    409 when none runs, or none can be reached without credentials."""
    from storage_engine.inspection.listener import listener_status

    status = listener_status(config)
    if status is None or status.get("state") != "running":
        state = "never ran" if status is None else status.get("state")
        raise AdminError(409, f"no Kafka listener runs on these log dirs (it {state}): topics, configs and consumer "
                              "groups are the broker's; start it (python -m storage_engine serve) and try again")
    for url in status.get("listeners") or []:
        protocol, _, address = str(url).partition("://")
        if protocol == "PLAINTEXT":
            return address
    raise AdminError(409, f"the Kafka listener has no PLAINTEXT listener the console could use "
                          f"({status.get('listeners')}): use a Kafka client with its credentials")


@contextlib.contextmanager
def admin_client(config: StorageConfig) -> Iterator[Any]:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    address = bootstrap(config)
    try:
        client = KafkaAdminClient(bootstrap_servers=address, client_id=CLIENT_ID,
                                  request_timeout_ms=REQUEST_TIMEOUT_MS)
    except KafkaError as exc:
        raise AdminError(409, f"cannot reach the Kafka listener at {address}: {exc}") from None
    try:
        yield client
    finally:
        client.close()


def _broker_error(exc: Exception) -> AdminError:
    """The broker's refusal as the reason it gave (its error_message when the response carries one)."""
    import re

    text = str(exc)
    message = re.search(r"error_message=(['\"])(.*?)\1", text)
    name = type(exc).__name__
    return AdminError(422, f"the broker refused it: {name}: {message.group(2) if message else text}")


def check_topic_configs(config: StorageConfig, topic: str, configs: dict[str, Any], *, creating: bool) -> dict:
    """Config values checked with the engine's rules, as the broker checks them (each value against Kafka's topic
    key, then :meth:`StorageConfig.check_topic_configs` on their combination); AdminError 422 naming the key."""
    from storage_engine.config_keys import topic_key
    from storage_engine.errors import ConfigError

    if not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
        raise AdminError(422, f"configs must map each key to a string value, got {configs!r}")
    try:
        for key, value in configs.items():
            topic_key(key).parse(value)
        config.check_topic_configs(topic, configs, creating=creating)
    except ConfigError as exc:
        raise AdminError(422, f"invalid config: {exc}") from None
    return dict(configs)


def create_topic(config: StorageConfig, topic: str, partitions: int, configs: dict[str, str]) -> dict:
    from kafka.errors import KafkaError

    check_topic_configs(config, topic, configs, creating=True)
    with admin_client(config) as client:
        try:
            client.create_topics({topic: {"num_partitions": partitions, "configs": configs}})
        except KafkaError as exc:
            raise _broker_error(exc) from None
    return {"topic": topic, "partitions": partitions, "configs": configs}


def alter_topic_configs(config: StorageConfig, topic: str, set_: dict[str, str], delete: list[str]) -> dict:
    """Set and remove topic overrides (IncrementalAlterConfigs: SET and DELETE)."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaError

    if not set_ and not delete:
        raise AdminError(422, "nothing to change: give configs to set or to delete")
    check_topic_configs(config, topic, set_, creating=False)
    from storage_engine.config_keys import TOPIC_KEYS
    for key in delete:
        if key not in TOPIC_KEYS:
            raise AdminError(422, f"invalid config: unknown topic config {key!r} to delete")
    changes: dict[str, Any] = {k: ("SET", v) for k, v in set_.items()}
    changes.update({k: ("DELETE", None) for k in delete})
    with admin_client(config) as client:
        try:
            client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=changes)], incremental=True)
        except KafkaError as exc:
            raise _broker_error(exc) from None
    return {"topic": topic, "set": set_, "deleted": delete}


def _describe(client: Any, group_id: str) -> dict:
    from kafka.errors import KafkaError

    try:
        found = client.describe_groups([group_id]).get(group_id) or {}
    except KafkaError as exc:
        raise _broker_error(exc) from None
    if found.get("error"):
        raise AdminError(422, f"the broker refused to describe group {group_id!r}: {found['error']}")
    return found


def _require_empty(found: dict, group_id: str, what: str) -> None:
    state = found.get("group_state")
    members = found.get("members") or []
    if state not in EMPTY_STATES or members:
        raise AdminError(409, f"group {group_id!r} is {state} with {len(members)} member(s): Kafka {what}; stop "
                              "its consumers first")


def reset_preview(config: StorageConfig, group_id: str, topic: str, partitions: list[int] | None, to: str,
                  value: int | None) -> dict:
    """What resetting ``group_id``'s offsets on ``topic`` (every partition, or ``partitions``) would commit: per
    partition the committed offset now, the log start and end, and the new offset (``to`` earliest, latest,
    timestamp: the first offset at or after ``value`` ms, the log end when none; offset: ``value``, clamped into
    the log as Kafka's tool does), with the group's state and whether it may be reset now."""
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec
    from kafka.errors import KafkaError

    if to not in RESET_TO:
        raise AdminError(422, f"to must be one of {list(RESET_TO)}, got {to!r}")
    if to in ("timestamp", "offset") and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise AdminError(422, f"value must be an integer >= 0 (the {to}), got {value!r}")
    with admin_client(config) as client:
        found = _describe(client, group_id)
        try:
            meta = client.describe_topics([topic])
        except KafkaError as exc:
            raise _broker_error(exc) from None
        known = sorted(p.get("partition_index", p.get("partition")) for t in meta
                       if topic in (t.get("name"), t.get("topic")) for p in t.get("partitions") or [])
        if not known:
            raise AdminError(422, f"no topic {topic!r} on the broker")
        chosen = known if not partitions else partitions
        missing = sorted(set(chosen) - set(known))
        if missing:
            raise AdminError(422, f"topic {topic!r} has no partition(s) {missing} (it has {known})")
        tps = [TopicPartition(topic, p) for p in chosen]
        try:
            committed = client.list_group_offsets({group_id: tps}).get(group_id) or {}
            starts = client.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
            ends = client.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
            at = (client.list_partition_offsets({tp: value for tp in tps}) if to == "timestamp" else {})
        except KafkaError as exc:
            raise _broker_error(exc) from None
    rows = []
    for tp in tps:
        start, end = starts[tp].offset, ends[tp].offset
        now = committed.get(tp)
        current = now.offset if now is not None and now.offset >= 0 else None
        note = ""
        if to == "earliest":
            new = start
        elif to == "latest":
            new = end
        elif to == "timestamp":
            new = at[tp].offset
            if new is None or new < 0:
                new, note = end, "no record at or after the timestamp: the log end"
        else:
            new = min(max(int(value or 0), start), end)
            if new != value:
                note = f"{value} is outside the log [{start}, {end}]: clamped"
        rows.append({"partition": tp.partition, "current": current, "log_start_offset": start,
                     "log_end_offset": end, "new": new, "note": note})
    state = found.get("group_state")
    members = len(found.get("members") or [])
    empty = state in EMPTY_STATES and not members
    return {"group_id": group_id, "topic": topic, "to": to, "value": value, "state": state, "members": members,
            "may_reset": empty, "reason": None if empty else f"the group is {state} with {members} member(s): Kafka "
            "resets offsets only for an empty group; stop its consumers first", "partitions": rows}


def reset_offsets(config: StorageConfig, group_id: str, topic: str, offsets: dict[int, int]) -> dict:
    """Commit ``offsets`` ({partition: offset}, as previewed) for the empty group ``group_id`` (OffsetCommit
    with no member, as Kafka's AdminClient.alterConsumerGroupOffsets); each offset must lie in its partition's
    log now. Returns the committed offsets before and after."""
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    if not offsets:
        raise AdminError(422, "no offsets to commit: preview the reset first")
    tps = {p: TopicPartition(topic, p) for p in sorted(offsets)}
    with admin_client(config) as client:
        _require_empty(_describe(client, group_id), group_id, "resets the offsets only of an empty group")
        try:
            starts = client.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps.values()})
            ends = client.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps.values()})
        except KafkaError as exc:
            raise _broker_error(exc) from None
        for p, tp in tps.items():
            if not starts[tp].offset <= offsets[p] <= ends[tp].offset:
                raise AdminError(422, f"offset {offsets[p]} of {topic}-{p} is outside its log now "
                                      f"[{starts[tp].offset}, {ends[tp].offset}]: preview again")
        try:
            before = client.list_group_offsets({group_id: list(tps.values())}).get(group_id) or {}
            answer = client.alter_group_offsets(group_id, {tp: OffsetAndMetadata(offsets[p], "", -1)
                                                           for p, tp in tps.items()})
        except KafkaError as exc:
            raise _broker_error(exc) from None
    errors = {f"{tp.topic}-{tp.partition}": getattr(err, "__name__", str(err)) for tp, err in answer.items()
              if getattr(err, "__name__", "NoError") != "NoError"}
    if errors:
        raise AdminError(409 if any("Member" in e or "Generation" in e for e in errors.values()) else 422,
                         f"the broker refused the commit: {errors}")
    return {"group_id": group_id, "topic": topic, "offsets": {str(p): o for p, o in offsets.items()},
            "before": {str(tp.partition): (v.offset if v.offset >= 0 else None) for tp, v in before.items()}}


def delete_group(config: StorageConfig, group_id: str) -> dict:
    """Delete the empty group ``group_id`` and its committed offsets (DeleteGroups)."""
    from kafka.errors import KafkaError

    with admin_client(config) as client:
        found = _describe(client, group_id)
        if found.get("group_state") == "Dead":
            raise AdminError(422, f"no group {group_id!r} on the broker")
        _require_empty(found, group_id, "deletes only an empty group")
        try:
            answer = dict(client.delete_groups([group_id]))
        except KafkaError as exc:
            raise _broker_error(exc) from None
    error = answer.get(group_id)
    if error not in (None, "NoError") and getattr(error, "__name__", "NoError") != "NoError":
        raise AdminError(409 if "NonEmpty" in str(error) else 422, f"the broker refused to delete it: {error}")
    return {"group_id": group_id, "deleted": True}
