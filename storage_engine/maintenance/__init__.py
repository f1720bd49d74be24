"""Housekeeping over logs: retention, compaction (cleaner, cleaner manager, key maps) and the whole jobs the CLI and Airflow run."""
