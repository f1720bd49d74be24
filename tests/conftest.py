"""Suite-wide fixtures. Airflow-specific set-up lives in tests/airflow/conftest.py."""
from __future__ import annotations

import pytest


@pytest.fixture
def log_dir(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d
