"""Bad-input reproducers (ARCHITECTURE.md section 6), each as a real ``python -m storage_engine`` subprocess: a
config that is no regular file, a log dir that is a file, ``verify --strict`` writing nothing, a usage error, a
garbage cleaner checkpoint. Every failure is one line on stderr, never a traceback.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import pytest

from storage_engine import layout
from tests.paths import REPO

pytestmark = pytest.mark.e2e

MEMORY_LIMIT = 256 * 1024 * 1024     # address space of the child: /dev/zero read whole would exceed it at once


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(*args, stdin: str = "", limit_memory: bool = False, timeout: float = 120) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "storage_engine", *map(str, args)], input=stdin.encode(),
                          capture_output=True, cwd=str(REPO), timeout=timeout,
                          preexec_fn=_limit_memory if limit_memory else None)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert "Traceback" not in err and "MemoryError" not in err, err
    return proc.returncode, out, err


def error_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("storage-engine: error: "), err
    return err


def write_config(path, dirs, topics=None) -> str:
    path.write_text(json.dumps({"broker": {"log.dirs": [str(d) for d in dirs], "log.segment.bytes": 1024},
                                "topics": topics or {}}), encoding="utf-8")
    return str(path)


def produce(cfg: str, topic: str, partition: int, n: int, start: int = 0) -> None:
    lines = "".join(json.dumps({"key": f"k{i % 4}", "value": f"value-{i}" * 8}) + "\n" for i in range(start, n))
    rc, out, err = run("--config", cfg, "produce", "--topic", topic, "--partition", partition, stdin=lines)
    assert rc == 0, err


def tree(*roots) -> dict:
    out = {}
    for root in roots:
        for d, dirs, files in os.walk(root):
            for n in [".", *dirs, *files]:
                p = os.path.normpath(os.path.join(d, n))
                st = os.lstat(p)
                out[p] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def test_config_dev_zero_fails_at_once_in_bounded_memory():
    started = time.monotonic()
    rc, out, err = run("--config", "/dev/zero", "describe", limit_memory=True, timeout=30)
    assert rc == 2 and out == "" and time.monotonic() - started < 30
    assert error_line(err) == ("storage-engine: error: cannot read config file /dev/zero: not a regular file "
                               "(a character device)\n")


def test_a_fifo_config_or_a_huge_one_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    rc, out, err = run("--config", fifo, "verify", timeout=30)      # nobody writes: a blocking open would hang
    assert rc == 2 and f"{fifo}: not a regular file (a FIFO)" in error_line(err)
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate(4 * 1024 * 1024 * 1024)                           # sparse: 4 GiB of zeros, no disk used
    rc, out, err = run("--config", huge, "verify", limit_memory=True, timeout=30)
    assert rc == 2 and f"{huge}: too large (4294967296 bytes, limit 1048576)" in error_line(err)


def test_a_log_dir_that_is_a_file_is_offline_and_the_others_serve(tmp_path):
    plain = tmp_path / "plain-file"
    plain.write_text("not a dir")
    good = tmp_path / "logs"
    cfg = write_config(tmp_path / "storage.yaml", [good, plain])
    produce(cfg, "t", 0, 5)
    rc, out, err = run("--config", cfg, "consume", "--topic", "t", "--partition", 0)
    assert rc == 0 and [json.loads(x)["offset"] for x in out.splitlines()] == [0, 1, 2, 3, 4]
    rc, out, err = run("--config", cfg, "verify")
    report = json.loads(out)
    assert rc == 0 and not report["damaged"] and "NotADirectoryError" in report["offline_dirs"][str(plain)]
    rc, out, err = run("--config", cfg, "describe")
    dirs = {d["path"]: d["status"] for d in json.loads(out)["log_dirs"]}
    assert rc == 0 and dirs == {str(good): "online", str(plain): "offline"}
    # Only the file left: no dir is usable, exit 2 in one line.
    only = write_config(tmp_path / "only-file.yaml", [plain])
    for command in (["verify"], ["describe"], ["produce", "--topic", "t", "--partition", "0"]):
        rc, out, err = run("--config", only, *command, stdin='{"value": "x"}\n')
        assert rc == 2 and out == "" and f"no usable log dir in {only}" in error_line(err)
    assert plain.read_text() == "not a dir"


def test_verify_strict_writes_nothing(tmp_path):
    dirs = [tmp_path / "dir-a", tmp_path / "dir-b"]
    cfg = write_config(tmp_path / "storage.yaml", dirs,
                       {"kv": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}})
    for topic in ("t", "kv"):
        for p in (0, 1):
            produce(cfg, topic, p, 40)
    rc, out, err = run("--config", cfg, "compact", "--now-ms", 10**12)
    assert rc == 0, err
    for d in dirs:      # as after a Kafka broker: no engine lock or claim file for the partitions
        for name in os.listdir(d):
            if name.startswith((layout.PARTITION_STATE_PREFIX, layout.CLEANING_CLAIM_PREFIX)):
                os.remove(os.path.join(d, name))
    before = tree(*dirs)
    for _ in range(2):
        rc, out, err = run("--config", cfg, "verify", "--strict")
        assert rc == 0 and not json.loads(out)["damaged"], out[-2000:]
        assert tree(*dirs) == before


@pytest.mark.parametrize("args, needle", [
    (["produce", "--topic", "t", "--partition", "x"], "argument --partition: expected an integer, got 'x'"),
    (["verify", "--nosuch"], "unrecognized arguments: --nosuch"),
])
def test_a_usage_error_is_one_line(args, needle):
    rc, out, err = run(*args)
    assert rc == 2 and out == ""
    assert error_line(err).startswith(f"storage-engine: error: {needle} (see python -m storage_engine")
    rc, out, err = run(args[0], "--help")
    assert rc == 0 and out.startswith("usage:") and err == ""


def test_a_garbage_cleaner_checkpoint_in_a_dir_of_delete_policy_topics_leaves_verify_at_0(tmp_path):
    logs = tmp_path / "logs"
    cfg = write_config(tmp_path / "storage.yaml", [logs])
    produce(cfg, "t", 0, 30)
    (logs / layout.CLEANER_OFFSET_CHECKPOINT).write_bytes(b"garbage\x00\n")
    for strict in ([], ["--strict"]):
        rc, out, err = run("--config", cfg, "verify", *strict)
        report = json.loads(out)
        assert rc == 0 and not report["damaged"], out
        assert [p["file"] for p in report["pending"]] == [str(logs / layout.CLEANER_OFFSET_CHECKPOINT)]
    rc, out, err = run("--config", cfg, "compact", "--now-ms", 10**12)
    assert rc == 0 and json.loads(out)["failed"] == []
