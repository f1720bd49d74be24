"""Which collected tests make a process die by a signal: a pytest plugin for the check that ``make test-fast`` runs
none (tests/test_suite_rules.py).

A test kills a process when its function, a fixture it uses, or a function, class or string of the repository's
test code that these name (the tests and their harnesses such as ``torture/``; followed from name to name, not into
the engine) does one of these:

* calls ``os.kill``, ``os.killpg``, ``.kill()``, ``.terminate()`` or ``.send_signal()``;
* names a signal (``signal.SIGKILL``, ``-signal.SIGBUS`` as an expected exit status);
* arms a crash point (:mod:`storage_engine.crashpoints`, or its environment variable): the process dies by
  SIGKILL at that step;
* runs a helper script of ``tests/storage_engine/procs`` that does one of the above, or a code string that does.

Docstrings and comments do not count. ``python -m pytest --collect-only -p tests.kill_audit`` with
``$KILL_AUDIT_OUT`` set writes ``{"selected": {node id: [evidence]}, "deselected": {...}}`` there, for the
killing tests among the selected and the deselected items.
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import pathlib
import re
import textwrap
import types
from typing import Any

import pytest

from storage_engine import crashpoints

ENV_VAR = "KILL_AUDIT_OUT"
TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent
ENGINE = REPO / "storage_engine"
PROCS = TESTS / "storage_engine" / "procs"
KILL_CALLS = frozenset({"kill", "killpg", "terminate", "send_signal"})
SIGNAL_NAME = re.compile(r"SIG(KILL|TERM|INT|BUS|SEGV|ABRT|HUP|QUIT|STOP|USR1|USR2|ALRM)")
KILLING_TEXT = re.compile(r"os\.kill\(|killpg\(|\.kill\(\)|\.terminate\(\)|\bSIG(KILL|TERM|INT|BUS|SEGV|ABRT)\b|"
                          r"\bcrashpoints\b|" + re.escape(crashpoints.ENV_VAR))


def _body_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of ``tree`` that are not docstrings."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


def killing_scripts() -> dict[str, str]:
    """{name the tests run it by: why it kills} for the helper scripts of tests/storage_engine/procs."""
    out = {}
    for path in sorted(PROCS.glob("*.py")):
        found = _direct_evidence(ast.parse(path.read_text()), f"procs/{path.name}")
        if found:
            out[path.name] = found[0]
            out[f"tests.storage_engine.procs.{path.stem}"] = found[0]
    return out


def _direct_evidence(tree: ast.AST, where: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KILL_CALLS:
            found.append(f"{where}: calls .{node.func.attr}()")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "signal" \
                and node.attr.startswith("SIG") and not node.attr.startswith("SIG_"):
            found.append(f"{where}: names signal.{node.attr}")
        elif isinstance(node, ast.Name) and SIGNAL_NAME.fullmatch(node.id):
            found.append(f"{where}: names {node.id}")
        elif isinstance(node, (ast.Name, ast.Attribute)) and (
                getattr(node, "id", None) == "crashpoints" or getattr(node, "attr", None) == "crashpoints"):
            found.append(f"{where}: arms crash points (storage_engine.crashpoints)")
    for const in _body_strings(tree):
        assert isinstance(const.value, str)   # _body_strings keeps the str constants
        if KILLING_TEXT.search(const.value):
            found.append(f"{where}: runs code that kills: {const.value.strip()[:60]!r}")
    return found


class Auditor:
    """Evidence that a function (and what it names, transitively, within the test suite) kills a process."""

    def __init__(self) -> None:
        self.scripts = killing_scripts()
        self._memo: dict[int, list[str]] = {}

    def evidence(self, obj: Any) -> list[str]:
        return self._evidence(obj, set())

    def _evidence(self, obj: Any, seen: set[int]) -> list[str]:
        obj = inspect.unwrap(obj) if callable(obj) else obj
        key = id(obj)
        if key in self._memo:
            return self._memo[key]
        if key in seen:
            return []
        seen.add(key)
        if isinstance(obj, str):
            found = [f"runs code that kills: {obj.strip()[:60]!r}"] if KILLING_TEXT.search(obj) else []
            found += [f"runs {name}: {why}" for name, why in self.scripts.items() if obj.endswith(name)]
            self._memo[key] = found
            return found
        try:
            source = textwrap.dedent(inspect.getsource(obj))
            tree = ast.parse(source)
        except (OSError, TypeError, SyntaxError):
            return []
        where = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"
        found = _direct_evidence(tree, where)
        for const in _body_strings(tree):
            assert isinstance(const.value, str)
            found += [f"{where}: runs {name}: {why}" for name, why in self.scripts.items()
                      if const.value.endswith(name)]
        namespace = self._namespace(obj)
        # A default argument is what a helper does unless told otherwise (``Steps(n, action=die)``): the callers
        # that rely on it are followed through their own code, not every caller of the helper.
        defaults = {id(n) for a in ast.walk(tree) if isinstance(a, ast.arguments)
                    for d in a.defaults + [k for k in a.kw_defaults if k is not None] for n in ast.walk(d)}
        for node in ast.walk(tree):
            if id(node) in defaults:
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                target = namespace.get(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    isinstance(namespace.get(node.value.id), types.ModuleType):
                target = getattr(namespace[node.value.id], node.attr, None)
            else:
                continue
            if self._of_the_suite(target):
                found += self._evidence(target, seen)
        found = list(dict.fromkeys(found))
        self._memo[key] = found
        return found

    @staticmethod
    def _namespace(obj: Any) -> dict[str, Any]:
        module = inspect.getmodule(obj)
        return dict(vars(module)) if module is not None else {}

    @staticmethod
    def _of_the_suite(target: Any) -> bool:
        """A string, or a function or class of the repository's test code: the tests and their harnesses
        (``torture/``, ``mutation/``, ...), not the engine (whose crash points kill only where a test arms them)
        nor an installed package."""
        if isinstance(target, str):
            return True
        if not (inspect.isfunction(target) or inspect.isclass(target)):
            return False
        try:
            path = pathlib.Path(inspect.getfile(target)).resolve()
        except (TypeError, OSError):
            return False
        return path.is_relative_to(REPO) and not any(path.is_relative_to(p) for p in (ENGINE, REPO / ".venv"))


def item_evidence(auditor: Auditor, item: pytest.Item) -> list[str]:
    """Why ``item`` kills a process (empty: it kills none): its function and the fixtures it uses."""
    found = auditor.evidence(getattr(item, "function", None))
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixturedef in defs:
            if Auditor._of_the_suite(fixturedef.func):
                found = found + auditor.evidence(fixturedef.func)
    return list(dict.fromkeys(found))


_deselected: list[pytest.Item] = []


def pytest_deselected(items: list[pytest.Item]) -> None:
    _deselected.extend(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    out = os.environ.get(ENV_VAR)
    if not out:
        return
    auditor = Auditor()
    report = {}
    for name, items in (("selected", session.items), ("deselected", _deselected)):
        report[name] = {item.nodeid: ev for item in items if (ev := item_evidence(auditor, item))}
    pathlib.Path(out).write_text(json.dumps(report, indent=1, sort_keys=True))
