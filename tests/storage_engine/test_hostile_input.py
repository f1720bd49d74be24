"""Hostile input once handled wrong, one test per case: each is a clear error naming the value, exit
code 2, no traceback, and nothing written anywhere (no log dir created, no record appended).

(The rest of the hostile-input matrix, topic names, partitions, config values, records and offsets, is in
``test_bad_input.py`` and ``test_config.py``; RELIABILITY.md lists every case.)
"""
from __future__ import annotations

import io
import json
import os
import sys
import types

import pytest

from storage_engine.config_file import load_config
from storage_engine.errors import ConfigError
from storage_engine.log.manager import LogManager
from storage_engine.record.records import SimpleRecord
from storage_engine.cli import main

pytestmark = pytest.mark.unit

KAFKA_DEFAULT = "/tmp/kafka-logs"


def run(capsys, monkeypatch, argv, stdin: bytes = b""):
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(stdin)))
    try:
        rc: int | str | None = main.main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def snapshot(root) -> dict:
    out = {}
    for d, _dirs, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


@pytest.fixture
def store(tmp_path):
    cfg = tmp_path / "storage.yaml"
    cfg.write_text(json.dumps({"broker": {"log.dirs": [str(tmp_path / "logs")]}}), encoding="utf-8")
    with LogManager.open(load_config(str(cfg))) as mgr:
        mgr.get_or_create_log("t", 0).append_records([SimpleRecord(b"k", b"v")])
    return types.SimpleNamespace(cfg=str(cfg), root=str(tmp_path), before=snapshot(tmp_path / "logs"),
                                 logs=str(tmp_path / "logs"))


def default_dir_state():
    return os.path.exists(KAFKA_DEFAULT) and sorted(os.listdir(KAFKA_DEFAULT))


@pytest.mark.parametrize("depth", [1000, 100_000])
@pytest.mark.parametrize("container", ["[", '{"a":'])
def test_deeply_nested_json_on_produce_is_a_clear_error(capsys, monkeypatch, store, depth, container):
    line = (container * depth).encode() + b"\n"
    rc, out, err = run(capsys, monkeypatch, ["--config", store.cfg, "produce", "--topic", "t", "--partition", 0], line)
    assert rc == 2 and out == ""
    assert "line 1" in err and ("nested too deeply" in err or "malformed JSON" in err)
    assert snapshot(store.logs) == store.before


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "broker:\n", "topics: {}\n",
                                  "broker:\n  log.segment.bytes: 4096\n"],
                         ids=["empty", "newline", "comment", "empty-broker", "only-topics", "no-log-dirs"])
@pytest.mark.parametrize("command", [["produce", "--topic", "t", "--partition", "0"], ["verify"], ["describe"],
                                     ["checkpoint", "--flush"], ["retention"], ["compact"]],
                         ids=lambda c: c[0])
def test_a_config_without_log_dirs_is_refused_and_nothing_is_written(capsys, monkeypatch, tmp_path, text, command):
    before = default_dir_state()
    cfg = tmp_path / "empty.yaml"
    cfg.write_text(text, encoding="utf-8")
    rc, out, err = run(capsys, monkeypatch, ["--config", cfg, *command], b'{"value":"x"}\n')
    assert rc == 2 and out == ""
    assert "no log.dirs (or log.dir) is set" in err and KAFKA_DEFAULT in err and str(cfg) in err
    assert default_dir_state() == before, "nothing may appear in Kafka's default directory"
    assert sorted(os.listdir(tmp_path)) == ["empty.yaml"]


@pytest.mark.parametrize("dirs", [["logs", "logs/t-0"], ["a/b/c", "a"], ["x", "./x/../x/y"]],
                         ids=["partition-inside", "outer-second", "normalised"])
def test_nested_log_dirs_are_refused(capsys, monkeypatch, store, dirs):
    cfg = os.path.join(store.root, "nested.yaml")
    with open(cfg, "w") as f:
        json.dump({"broker": {"log.dirs": dirs}}, f)
    rc, out, err = run(capsys, monkeypatch, ["--config", cfg, "produce", "--topic", "t", "--partition", 0],
                       b'{"value":"x"}\n')
    assert rc == 2 and "must not be nested" in err and "lies inside" in err
    assert snapshot(store.logs) == store.before
    with pytest.raises(ConfigError, match="lies inside"):
        load_config(cfg)


@pytest.mark.parametrize("kind", ["regular-file", "dev-null", "file-on-the-path"])
@pytest.mark.parametrize("command", [["produce", "--topic", "t", "--partition", "0"], ["verify"], ["describe"]],
                         ids=lambda c: c[0])
def test_a_log_dir_that_is_a_file_or_a_device_is_refused(capsys, monkeypatch, tmp_path, kind, command):
    """A device is a mistake in the config; a file is a dir that is offline (test_bad_input.py: the other dirs
    serve): as the only log dir, nothing is usable. Either way exit 2, one line naming it, nothing written."""
    plain = tmp_path / "plain-file"
    plain.write_text("not a dir")
    target = {"regular-file": str(plain), "dev-null": "/dev/null", "file-on-the-path": str(plain / "sub")}[kind]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"broker": {"log.dirs": [target]}}), encoding="utf-8")
    rc, out, err = run(capsys, monkeypatch, ["--config", cfg, *command], b'{"value":"x"}\n')
    assert rc == 2 and out == "" and err.count("\n") == 1
    if kind == "dev-null":
        assert repr(target) in err and "a device; a log dir must be a directory" in err
    else:
        assert f"no usable log dir in {cfg}" in err and f"{target} (NotADirectoryError" in err
    assert plain.read_text() == "not a dir" and sorted(os.listdir(tmp_path)) == ["c.yaml", "plain-file"]
