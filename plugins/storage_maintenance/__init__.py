"""Airflow side of the log-storage housekeeping, in three parts:

* :mod:`.tasks`: what the DAG files are built from: hook, operators, trigger-form params, notifiers, the run's
  end (run report), assets and the wiring every maintenance DAG shares;
* :mod:`.reporting`: run summaries, root causes of failures, the run history from the metadata DB;
* :mod:`.ui`: the web UI inside the api-server (the Storage view and the console: one app, one shared web module,
  their routers, the console's actions, the templates).

:mod:`.maintenance_dags` holds the plain names they all read (DAG ids, task ids, asset URIs). Imports run one way:
``ui`` -> ``tasks`` -> ``reporting`` -> ``maintenance_dags``; nothing here is imported by the engine.

The package lives in Airflow's plugins folder, which Airflow puts on ``sys.path``, so DAG files import it as
``storage_maintenance``. Only ``plugin.py`` is loaded by Airflow's plugin manager (see ``.airflowignore``):
the manager imports every other ``.py`` file it finds as a top-level module named after the file, which
would break this package's relative imports and shadow names such as ``hooks``.
"""
