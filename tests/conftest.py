"""Suite-wide fixtures. Airflow-specific set-up lives in tests/airflow/conftest.py."""
from __future__ import annotations

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
REAL_KAFKA_FIXTURES = SHARED / "fixtures" / "real-kafka"


@pytest.fixture
def log_dir(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d
