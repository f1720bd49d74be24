"""PySpark programs submitted with spark-submit. They import storage_engine, never Airflow."""
