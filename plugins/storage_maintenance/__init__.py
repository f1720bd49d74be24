"""Airflow side of the log-storage housekeeping: hook, operators, failure notifier, DAG params.

The package lives in Airflow's plugins folder, which Airflow puts on ``sys.path``, so DAG files import it as
``storage_maintenance``. Only ``plugin.py`` is loaded by Airflow's plugin manager (see ``.airflowignore``):
the manager imports every other ``.py`` file it finds as a top-level module named after the file, which
would break this package's relative imports and shadow names such as ``hooks``.

Layers, as in Airflow's Spark provider: :mod:`.hooks` owns the mechanics (which config, the clock, calling
the jobs of ``storage_engine.jobs``); :mod:`.operators` hold templated parameters and hand off to the hook;
:mod:`.params` builds the trigger-form schema; :mod:`.notifiers` sends the failure alerts. Nothing here is
imported by the engine.
"""
