"""Spark fixtures: a local SparkSession for in-process map building, and the environment spark-submit needs
(the venv's bin first on PATH so the pip package's spark-submit is used, PYSPARK_PYTHON = this interpreter)."""
from __future__ import annotations

import logging
import os
import sys

import pytest

# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after pytest closed the
# streams, which prints a logging traceback below the test summary.
logging.getLogger("py4j").setLevel(logging.WARNING)

VENV_BIN = os.path.dirname(sys.executable)


def spark_env(**extra) -> dict:
    env = dict(os.environ)
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.pop("SPARK_HOME", None)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"   # never bind or talk beyond loopback
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def spark():
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]").appName("tests")
               .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1").config("spark.sql.shuffle.partitions", "4")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
