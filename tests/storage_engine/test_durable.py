"""The crash-safety protocol (write temp -> fsync -> rename -> fsync dir) and its errors."""
from __future__ import annotations

import os

import pytest

from storage_engine import durable, layout
from storage_engine.errors import StorageIOError

pytestmark = pytest.mark.unit


def test_atomic_write_replaces_the_whole_file_and_leaves_no_temp(tmp_path):
    path = str(tmp_path / "checkpoint")
    durable.atomic_write(path, b"old contents, longer")
    durable.atomic_write(path, b"new")
    assert open(path, "rb").read() == b"new"
    assert os.listdir(tmp_path) == ["checkpoint"]


def test_atomic_write_over_a_stale_temp_file(tmp_path):
    """A crash after the temp file was written leaves it behind; the next write simply replaces it."""
    path = str(tmp_path / "checkpoint")
    (tmp_path / ("checkpoint" + layout.TMP_SUFFIX)).write_bytes(b"half")
    durable.atomic_write(path, b"whole")
    assert sorted(os.listdir(tmp_path)) == ["checkpoint"]


def test_a_failed_write_keeps_the_old_file_and_names_the_path(tmp_path):
    path = str(tmp_path / "checkpoint")
    durable.atomic_write(path, b"kept")
    os.mkdir(path + layout.TMP_SUFFIX)  # the temp file cannot be created
    with pytest.raises(StorageIOError, match="cannot write file atomically: .*checkpoint"):
        durable.atomic_write(path, b"lost")
    assert open(path, "rb").read() == b"kept"


def test_durable_rename_and_its_error(tmp_path):
    src, dst = str(tmp_path / "a.cleaned"), str(tmp_path / "a.swap")
    open(src, "wb").close()
    durable.durable_rename(src, dst)
    assert os.listdir(tmp_path) == ["a.swap"]
    with pytest.raises(StorageIOError, match="cannot rename to .*a.log: .*a.cleaned"):
        durable.durable_rename(src, str(tmp_path / "a.log"))


def test_fsync_dir_and_file_errors_name_the_path(tmp_path):
    durable.fsync_dir(str(tmp_path))
    f = tmp_path / "f"
    f.write_bytes(b"x")
    durable.fsync_file(str(f))
    with pytest.raises(StorageIOError, match="cannot open directory to fsync: .*missing"):
        durable.fsync_dir(str(tmp_path / "missing"))
    with pytest.raises(StorageIOError, match="cannot open file to fsync: .*missing"):
        durable.fsync_file(str(tmp_path / "missing"))
