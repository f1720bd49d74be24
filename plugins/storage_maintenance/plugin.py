"""Registers the storage-maintenance package with Airflow (``airflow plugins`` lists it).

Deliberately empty apart from its name: the hook, operators and notifier are imported by the DAG files as
``storage_maintenance.*`` (the plugins folder is on ``sys.path``), and this module is imported by every
Airflow component at start-up, so it imports nothing heavy. Airflow loads this file as a top-level module
named ``plugin``; ``.airflowignore`` keeps it from loading the package's other modules the same way.
"""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class StorageMaintenancePlugin(AirflowPlugin):
    name = "storage_maintenance"
