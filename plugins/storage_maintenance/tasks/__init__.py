"""The Airflow parts that the DAG files are built from, as in Airflow's Spark provider: :mod:`.hooks` owns the
mechanics (which config, the clock, calling the jobs of ``storage_engine.jobs``); :mod:`.operators`,
:mod:`.compaction` and :mod:`.balance` hold templated parameters and hand off to the hook; :mod:`.params` builds
the trigger form's schema and reads a run's ``as_of``; :mod:`.notifiers` sends the alerts; :mod:`.run_report` ends
every run; :mod:`.assets` names the assets; :mod:`.wiring` declares what every maintenance DAG shares."""
