"""One group's mutmut run in a scratch copy of the repository, and its results read back per module.

mutmut reads ``[tool.mutmut]`` from ``pyproject.toml`` in its working directory and writes everything under
``mutants/`` there, so each group gets its own copy (``var/mutation/<group>/``: the engine, the tests, the
project's ``pyproject.toml`` with the group's ``[tool.mutmut]`` appended), taken from a snapshot of the tree made
when the run starts (``var/mutation/_source/``), so edits during a run do not reach it. The copy is made afresh for every
run, so no verdict is ever carried over from a previous run; it is left in place afterwards for inspection
(``cd var/mutation/<group> && ../../../.venv/bin/mutmut show <name>``).

The runs force the pure-Python record loops (``STORAGE_ENGINE_PURE_PYTHON=1``): the optional C extension
would otherwise replace the very code being mutated.
"""
from __future__ import annotations

import ast
import difflib
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .groups import Group

REPO = Path(__file__).resolve().parent.parent
SCRATCH_ROOT = REPO / "var" / "mutation"
# The engine tests that run in-process and fast; the marked ones start JVMs, Airflow or second processes.
PLUGIN = "mutation_pytest_plugin"   # mutation/pytest_plugin.py, copied under this name (see there why)
PYTEST_ARGS = ["-p", "no:cacheprovider", "-p", PLUGIN, "-q",
               "-m", "not slow and not spark and not airflow and not e2e"]
STATUSES = ("killed", "timeout", "survived", "suspicious", "no tests", "segfault", "skipped",
            "caught by type check", "check was interrupted by user", "not checked")
PROGRESS_EVERY_S = 60.0
TIMEOUT_MULTIPLIER = 4.0
TIMEOUT_CONSTANT_S = 2.0


class ToolingError(RuntimeError):
    """mutmut did not complete a run: the report would say nothing about the tests."""


@dataclass
class Mutant:
    name: str
    module: str
    function: str        # as written in the source: ``func`` or ``Class.method``
    status: str
    removed: list[str] = field(default_factory=list)   # the lines of the function the mutation changed ...
    added: list[str] = field(default_factory=list)     # ... and what it changed them into


@dataclass
class GroupResult:
    group: Group
    seconds: float
    mutants: list[Mutant]


def module_name(path: str) -> str:
    return path[:-len(".py")].replace("/", ".")


def mutmut_section(group: Group) -> str:
    def toml_list(values: list[str] | tuple[str, ...]) -> str:
        return "[" + ", ".join(json.dumps(v) for v in values) + "]"
    return "\n".join([
        "",
        "[tool.mutmut]",
        'source_paths = ["storage_engine"]',
        f"only_mutate = {toml_list(group.modules)}",
        f"pytest_add_cli_args_test_selection = {toml_list(group.tests)}",
        f"pytest_add_cli_args = {toml_list(PYTEST_ARGS)}",
        f"also_copy = {toml_list([PLUGIN + '.py'])}",
        # A mutant that makes a loop run forever is stopped after this many times the duration its tests had in
        # the clean pass (plus a constant): mutmut's default (15) let each such mutant hold a worker for a minute.
        f"timeout_multiplier = {TIMEOUT_MULTIPLIER}",
        f"timeout_constant = {TIMEOUT_CONSTANT_S}",
        "use_git_change_detection = false",
        "",
    ])


SNAPSHOT_PARTS = ("storage_engine", "tests", "pyproject.toml")


def snapshot(dest: Path) -> Path:
    """Copy the engine (with its built kernels), the tests and ``pyproject.toml`` as they are now: every group of
    a run is made from this copy, so a run judges the tree it started with, whatever is edited meanwhile."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in SNAPSHOT_PARTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, dest / name, ignore=ignore)
        else:
            shutil.copyfile(REPO / name, dest / name)
    return dest


def prepare(group: Group, scratch: Path, source: Path = REPO) -> None:
    """A fresh copy of what the group's tests need (from ``source``: the run's snapshot), with the group's mutmut
    configuration."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in ("storage_engine", "tests"):
        shutil.copytree(source / name, scratch / name, ignore=ignore)
    (scratch / "pyproject.toml").write_text((source / "pyproject.toml").read_text() + mutmut_section(group))
    shutil.copyfile(Path(__file__).with_name("pytest_plugin.py"), scratch / (PLUGIN + ".py"))
    # tests/paths.py finds the shared reference files beside the repository; mutmut runs the tests from
    # <scratch>/mutants, so they are looked for beside that.
    shared = REPO.parent / "shared"
    if shared.exists():
        (scratch / "shared").symlink_to(shared)


def _mutmut() -> str:
    beside = Path(sys.executable).with_name("mutmut")
    found = str(beside) if beside.exists() else shutil.which("mutmut")
    if not found:
        raise ToolingError("mutmut is not installed (it is pinned in requirements.txt: run `make venv`)")
    return found


def _env(tmp_root: Path | None = None, pure_python: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    if pure_python:
        env["STORAGE_ENGINE_PURE_PYTHON"] = "1"
    else:
        env.pop("STORAGE_ENGINE_PURE_PYTHON", None)
    env.pop("MUTANT_UNDER_TEST", None)
    if tmp_root is not None:
        # Every mutant is a pytest session, and each session ends by deleting old numbered temp dirs under the
        # temp root: under the shared /tmp that meant deleting other runs' dirs, seconds per mutant. Each run
        # gets its own root, in memory when /dev/shm is there (the tests' fsyncs then cost nothing; mutation
        # testing judges the logic, durability is tested elsewhere).
        env["PYTEST_DEBUG_TEMPROOT"] = env["TMPDIR"] = str(tmp_root)
    return env


def _tmp_root(scratch: Path, group: Group) -> Path:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = shm / f"storage-engine-mutation-{os.getpid()}-{group.name}"
    else:
        root = scratch / "tmp"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


def _count_done(scratch: Path, group: Group) -> tuple[int, int]:
    done = total = 0
    globs = group.mutant_globs()
    for path in group.modules:
        try:
            meta = json.loads((scratch / "mutants" / (path + ".meta")).read_text())
        except (OSError, ValueError):
            continue
        for name, code in meta.get("exit_code_by_key", {}).items():
            if globs and not any(fnmatch.fnmatch(name, g) for g in globs):
                continue
            total += 1
            done += code is not None
    return done, total


def run_group(group: Group, max_children: int, scratch_root: Path = SCRATCH_ROOT,
              progress: Callable[[str], object] = print, source: Path = REPO) -> GroupResult:
    scratch = scratch_root / group.name
    prepare(group, scratch, source)
    log_path = scratch / "mutmut-run.log"
    globs = group.mutant_globs()
    cmd = [_mutmut(), "run", "--max-children", str(max_children), *globs]
    start = time.monotonic()
    stop = threading.Event()

    def report_progress() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            done, total = _count_done(scratch, group)
            if total:
                progress(f"  {group.name}: {done}/{total} mutants done, {time.monotonic() - start:.0f} s")

    ticker = threading.Thread(target=report_progress, daemon=True)
    ticker.start()
    tmp_root = _tmp_root(scratch, group)
    try:
        with open(log_path, "w") as log:
            proc = subprocess.run(cmd, cwd=scratch, env=_env(tmp_root, group.pure_python), stdout=log,
                                  stderr=subprocess.STDOUT)
    finally:
        stop.set()
        ticker.join()
        shutil.rmtree(tmp_root, ignore_errors=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:].replace("\r", "\n")
        raise ToolingError(f"mutmut run for group {group.name!r} exited with {proc.returncode}; "
                           f"end of {log_path}:\n{tail}")
    return GroupResult(group, seconds, read_results(group, scratch))


def read_results(group: Group, scratch: Path) -> list[Mutant]:
    """Every mutant of the group's modules with its verdict (``mutmut results``), and for each one not killed
    the lines it changed."""
    proc = subprocess.run([_mutmut(), "results", "--all", "true"], cwd=scratch, env=_env(),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolingError(f"mutmut results failed in {scratch}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    modules = {module_name(p): p for p in group.modules}
    globs = group.mutant_globs()
    mutants: list[Mutant] = []
    for line in proc.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if not sep or "__mutmut_" not in name:
            continue
        if globs and not any(fnmatch.fnmatch(name, g) for g in globs):
            continue
        module = next((m for m in modules if name.startswith(m + ".")), None)
        if module is None:
            raise ToolingError(f"mutant {name} belongs to none of the group's modules {sorted(modules)}")
        if status not in STATUSES:
            raise ToolingError(f"mutant {name}: unknown status {status!r} (mutmut's output changed?)")
        mutants.append(Mutant(name, module, _function_of(name), status))
    if not mutants:
        raise ToolingError(f"mutmut reported no mutants for group {group.name!r}")
    by_file: dict[str, list[Mutant]] = {}
    for m in mutants:
        if m.status != "killed":
            by_file.setdefault(modules[m.module], []).append(m)
    for path, todo in by_file.items():
        _fill_diffs(scratch / "mutants" / path, todo)
    return mutants


def _function_of(name: str) -> str:
    mangled = name.rpartition(".")[2].partition("__mutmut_")[0]
    if mangled.startswith("x\u01c1"):
        _, cls, func = mangled.split("\u01c1")
        return f"{cls}.{func}"
    return mangled[len("x_"):]


def _fill_diffs(mutated_file: Path, mutants: list[Mutant]) -> None:
    """The lines each mutant changed, from the generated functions in mutmut's mutated copy of the module:
    ``<f>__mutmut_orig`` is the original, ``<f>__mutmut_<n>`` the mutant."""
    source = mutated_file.read_text()
    lines = source.splitlines()
    defs: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name:
            defs[node.name] = "\n".join(lines[node.lineno - 1:node.end_lineno])
    for m in mutants:
        generated = m.name.rpartition(".")[2]
        orig_name = generated.partition("__mutmut_")[0] + "__mutmut_orig"
        if generated not in defs or orig_name not in defs:
            raise ToolingError(f"cannot find {generated} / {orig_name} in {mutated_file}")
        before = defs[orig_name].replace(orig_name, "<f>").splitlines()
        after = defs[generated].replace(generated, "<f>").splitlines()
        for line in difflib.unified_diff(before, after, lineterm="", n=0):
            if line.startswith(("---", "+++", "@@")):
                continue
            if line.startswith("-"):
                m.removed.append(line[1:].strip())
            elif line.startswith("+"):
                m.added.append(line[1:].strip())
