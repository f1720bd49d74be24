"""Whole jobs the command line and Airflow run: each opens the logs it needs, acts as of ``now_ms``, closes them and
returns a JSON-able summary. Housekeeping (listing, checkpoint, flush, retention, producer expiry, purge:
:mod:`.housekeeping`), compaction (:mod:`.compaction`), the same per batch of partitions, each isolated
(:mod:`.batches`), the topic and log-dir lifecycle (:mod:`.lifecycle`) and the summaries they return
(:mod:`.summaries`). The mechanisms they drive live in :mod:`storage_engine.maintenance` and :mod:`storage_engine.log`.
"""
