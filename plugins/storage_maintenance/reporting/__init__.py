"""What the maintenance runs did and found, for the alerts and the web UI: the run summary built from a run's
task results (:mod:`.report`), the root causes of failures and the fixes an alert names (:mod:`.root_causes`),
and the run history read from Airflow's metadata DB (:mod:`.history`). Imports no other part of the plugin but
the names of :mod:`storage_maintenance.maintenance_dags`, so the tasks and the web UI can both use it."""
