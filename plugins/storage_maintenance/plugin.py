"""Registers the storage-maintenance plugin with Airflow: the Storage view (a FastAPI app inside the
api-server, under ``/storage-maintenance``) and its places in the UI.

* "Storage" in the navigation (``/plugin/storage``): log dirs, partitions, the dry-run plan;
* a Storage panel on Airflow's home page (a ``react_apps`` entry, destination ``dashboard``: :mod:`.ui.dashboard`):
  space, damage, the dirtiest partitions and the last failed maintenance run, each row linking to its page;
* "Run summary", a tab on every DAG run's page (``/dags/<dag>/runs/<run>/plugin/run-summary``), showing the
  run report of a maintenance run.

The hook, operators and notifiers are imported by the DAG files as ``storage_maintenance.tasks.*`` (the plugins
folder is on ``sys.path``). Airflow loads this file as a top-level module named ``plugin``; ``.airflowignore``
keeps it from loading the package's other modules the same way. Every Airflow component imports this module
at start-up: the view's app is built from FastAPI, which the api-server has loaded anyway, and it imports the
engine only when a page is asked for.
"""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from storage_maintenance.ui.app import PREFIX, app
from storage_maintenance.ui.dashboard import REACT_APP


class StorageMaintenancePlugin(AirflowPlugin):
    name = "storage_maintenance"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "Storage"}]
    external_views = [
        {"name": "Storage", "href": f"{PREFIX}/", "destination": "nav", "url_route": "storage",
         "category": "browse"},
        {"name": "Run summary", "href": f"{PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}", "destination": "dag_run",
         "url_route": "run-summary"},
    ]
    react_apps = [REACT_APP]
