"""A Kafka-compatible log store: record formats, segments, indexes, logs, checkpoints, retention, cleaning.

Pure library and CLI (``python -m storage_engine``); it imports neither Airflow nor Spark.
"""
__version__ = "0.1.0"
