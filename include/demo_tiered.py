"""The demo's tiered storage: a SeaweedFS under ``var/seaweedfs`` as the object store, the sample ``access-log``
topic tiered into it, and what is where afterwards.

:func:`start_object_store` stops the previous demo's ``weed`` (its pid is kept in ``var/seaweedfs/weed.pid``),
starts a fresh one (:class:`include.seaweedfs.WeedServer`) whose S3 gateway listens where the storage config's
``rsm.config.storage.s3.endpoint.url`` says, with the config's access key, and creates the config's bucket (the
engine never creates one). :func:`enable_tiering` is what an operator does to a running topic: an
``IncrementalAlterConfigs`` over Kafka's protocol (librdkafka) setting ``remote.storage.enable`` and a short
``local.retention.ms``. After the maintenance DAGs (``log_tiering`` among them) :func:`figures` reads local and
remote figures the way the Storage view does (:mod:`storage_engine.inspection.tiering`) and
:func:`read_from_log_start` reads a partition from its log start with a Kafka consumer: the first records come from
the object store. The ``weed`` keeps running after the demo, so ``make airflow``'s Storage view and ``make broker``
reach it; the next ``make demo`` restarts it.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from include.seaweedfs import WeedServer
from storage_engine.config import StorageConfig
from storage_engine.units import human_bytes

WEED_DIR = Path(__file__).resolve().parent.parent / "var" / "seaweedfs"
PID_FILE = WEED_DIR / "weed.pid"
TOPIC = "access-log"
LOCAL_RETENTION_MS = 86_400_000         # one day locally; retention.ms (three days) over local and remote


class ObjectStoreError(RuntimeError):
    pass


def _settings(config: StorageConfig) -> Any:
    from storage_engine.tiered.settings import RemoteStorageSettings

    settings = RemoteStorageSettings.of(config)
    if not settings.enabled:
        raise ObjectStoreError("the storage config does not enable tiered storage "
                               "(broker: remote.log.storage.system.enable: true and its rsm.config.* keys)")
    return settings


def stop_previous(folder: Path = WEED_DIR) -> int | None:
    """SIGTERM (then SIGKILL) the ``weed`` a previous demo left running; its pid, or None if none ran."""
    try:
        pid = int((folder / "weed.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not cmdline or Path(cmdline[0].decode(errors="replace")).name != "weed" \
            or not any(str(folder).encode() in a for a in cmdline):
        return None                 # the pid was reused by another process: leave it alone
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        os.killpg(pid, signal.SIGKILL)
    return pid


def start_object_store(config: StorageConfig, folder: Path = WEED_DIR) -> WeedServer:
    """A fresh SeaweedFS under ``folder`` serving S3 at the config's endpoint, with the config's bucket."""
    import boto3
    import shutil

    settings = _settings(config)
    endpoint = urlsplit(settings.endpoint_url)
    if endpoint.hostname not in ("127.0.0.1", "localhost") or endpoint.port is None:
        raise ObjectStoreError(f"rsm.config.storage.s3.endpoint.url = {settings.endpoint_url}: the demo runs its "
                               "object store on this machine; name http://127.0.0.1:<port>")
    stop_previous(folder)
    shutil.rmtree(folder, ignore_errors=True)
    server = WeedServer(folder, access_key=settings.access_key_id or "storage-engine",
                        secret_key=settings.secret_access_key or "storage-engine-secret")
    server.s3 = endpoint.port
    _check_free(endpoint.port, settings.endpoint_url)
    server.start()
    (folder / "weed.pid").write_text(f"{server.proc.pid if server.proc else ''}\n")
    s3 = boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id=server.access_key,
                      aws_secret_access_key=server.secret_key, region_name=settings.region)
    s3.create_bucket(Bucket=settings.bucket)
    return server


def _check_free(port: int, url: str) -> None:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise ObjectStoreError(f"port {port} of rsm.config.storage.s3.endpoint.url ({url}) is in use (`make "
                                   "cluster` runs its S3 gateway there): stop it, or name another port") from None


def enable_tiering(bootstrap: str, topic: str = TOPIC, local_retention_ms: int = LOCAL_RETENTION_MS) -> None:
    """``remote.storage.enable=true`` and ``local.retention.ms`` on ``topic``, over the wire as an operator sets
    them (``kafka-configs --alter``: IncrementalAlterConfigs)."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       ResourceType)

    # log_level 4: librdkafka's informational line about the admin client's background queue at close is noise
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("local.retention.ms", str(local_retention_ms), incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def figures(config: StorageConfig, topic: str = TOPIC) -> dict[str, Any]:
    """The Storage view's tiered figures of ``topic`` (:func:`storage_engine.inspection.tiering.tiering_status`)."""
    from storage_engine.inspection.tiering import tiering_status

    return dict(tiering_status(config, topics=[topic]))


def figures_table(status: dict[str, Any]) -> str:
    from include.sample_data import table

    rows = []
    for p in status["partitions"]:
        rows.append([f"{p['topic']}-{p['partition']}", p["log_start_offset"], p["local_log_start_offset"],
                     p["highest_tiered_offset"], p["log_end_offset"],
                     f"{p['local_segments']} / {human_bytes(p['local_bytes'])}",
                     f"{p['remote_segments']} / {human_bytes(p['remote_bytes'])}",
                     f"{p['lag_segments']} / {human_bytes(p['lag_bytes'])}"])
    for t in status["topics"]:
        rows.append([f"{t['topic']} (total)", "", "", "", "", f"{t['local_segments']} / {human_bytes(t['local_bytes'])}",
                     f"{t['remote_segments']} / {human_bytes(t['remote_bytes'])}",
                     f"{t['lag_segments']} / {human_bytes(t['lag_bytes'])}"])
    return table(["partition", "log start", "local log start", "highest tiered", "log end", "local segs / bytes",
                  "remote segs / bytes", "not tiered yet"], rows, right={1, 2, 3, 4, 5, 6, 7})


def read_from_log_start(bootstrap: str, topic: str, partition: int, count: int = 100) -> dict[str, Any]:
    """A Kafka consumer (librdkafka) assigned to the partition's earliest offset: the log start it was given and
    the offsets of the first ``count`` records it read."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-remote-read", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, low)])
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        while len(offsets) < min(count, high - low) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise ObjectStoreError(f"reading {topic}-{partition} from offset {low}: {msg.error()}")
            offset = msg.offset()
            if offset is not None:
                offsets.append(offset)
        return {"low": low, "high": high, "offsets": offsets}
    finally:
        consumer.close()


def report(config: StorageConfig, bootstrap: str, say: Callable[[str], None]) -> dict[str, Any]:
    """The tiered topic's figures, local and remote, and a consumer reading it from the log start: the first
    records it gets lie below the local log start, so they came from the object store."""
    status = figures(config)
    say(figures_table(status))
    h = status["store"].get("health") or {}
    if h.get("reachable") and h.get("bucket_exists") and h.get("credentials_ok"):
        say(f"object store: reachable, bucket {h.get('bucket')} exists, credentials accepted ({h.get('latency_ms')} "
            "ms for a listing)")
    else:
        say(f"object store: {h.get('error')} (fix: {h.get('fix')})")
    parts = [p for p in status["partitions"] if p["remote_segments"]]
    if not parts:
        raise ObjectStoreError(f"no segment of {TOPIC} reached the object store: did log_tiering run? "
                               "(see its output under var/airflow/demo/)")
    p = max(parts, key=lambda r: int(r["local_log_start_offset"] or 0) - int(r["log_start_offset"] or 0))
    read = read_from_log_start(bootstrap, p["topic"], p["partition"])
    remote = [o for o in read["offsets"] if o < int(p["local_log_start_offset"] or 0)]
    if read["low"] != p["log_start_offset"] or not read["offsets"] or read["offsets"][0] != read["low"] or not remote:
        raise ObjectStoreError(f"{p['topic']}-{p['partition']}: a consumer from the log start should read "
                               f"offsets {p['log_start_offset']}.. from the object store (local copies start at "
                               f"{p['local_log_start_offset']}); it was given {read['low']} and read "
                               f"{read['offsets'][:5]}..")
    say(f"{p['topic']}-{p['partition']}: a Kafka consumer (librdkafka) from the log start got offsets "
        f"{read['offsets'][0]}..{read['offsets'][-1]}; {len(remote)} of them lie below the local log start "
        f"{p['local_log_start_offset']}, where no local segment exists: read from the object store")
    topic = next((t for t in status["topics"] if t["topic"] == TOPIC), None)
    remote_bytes = topic["remote_bytes"] if topic else 0
    local_bytes = topic["local_bytes"] if topic else 0
    say(f"{TOPIC}: {human_bytes(local_bytes)} on local disk, {human_bytes(remote_bytes)} in the object store")
    return {"bucket": status["store"].get("bucket"), "remote_bytes_h": human_bytes(remote_bytes)}
