"""The Airflow assets of the log store: one per partition, one per maintenance DAG's runs.

* ``kafka-log://<topic>/<partition>`` (name ``kafka-log-<topic>-<partition>``): an event each time compaction
  cleaned the partition, with the figures in its ``extra``: ``kind`` (``compaction``), ``as_of``, bytes
  reclaimed, records removed, the size after, the duration. The clean task emits it through the alias below,
  since which partitions are cleaned is known only at run time.
* ``kafka-log-maintenance://<dag_id>`` (name ``<dag_id>-runs``): one event per finished run, from the run's
  report, with the run's totals (retention's figures per partition stay in its batches' XComs: an event per
  partition would mean 10,000 events a run on a broker-sized store).
"""
from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

from ..maintenance_dags import RUN_URI_PREFIX, partition_uri

COMPACTED_ALIAS = AssetAlias("kafka-log-compactions")


def partition_asset(topic: str, partition: int) -> Asset:
    return Asset(uri=partition_uri(topic, partition), name=f"kafka-log-{topic}-{partition}")


def run_asset(dag_id: str) -> Asset:
    return Asset(uri=f"{RUN_URI_PREFIX}{dag_id}", name=f"{dag_id}-runs")
