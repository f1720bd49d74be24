"""Tiered storage (Kafka's KIP-405): sealed segments copied into an S3 object store, their states kept in the internal
topic ``__remote_log_metadata`` in Kafka's own schemas, and read back for offsets below the local log start.

Settings (:mod:`.settings`), object keys (:mod:`.keys`), the object store (:mod:`.object_store`), the metadata records
(:mod:`.metadata`) and the remote log view rebuilt from them (:mod:`.remote_log`). This package sits above
:mod:`storage_engine.log` and :mod:`storage_engine.maintenance` (which never import it) and never imports the broker,
Airflow or Spark. Nothing is imported here: modules are imported where used.
"""
