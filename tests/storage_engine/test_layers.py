"""The engine's layers as the folders show them: nothing imports upward, nothing imports Airflow or Spark, and
the public API resolves."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import storage_engine
from tests.paths import REPO

pytestmark = pytest.mark.unit

ENGINE = REPO / "storage_engine"
# Lowest first; a module may import its own layer and the ones before it.
LAYERS = [
    {"errors", "layout", "durable", "clock", "config_keys", "config", "config_file", "units", "topic_store",
     "masking"},
    {"record"},
    {"segment"},
    {"log"},
    {"maintenance"},
    {"tiered"},
    {"acl"},
    {"jobs"},
    {"inspection"},
    {"server"},
    {"cli"},
]


def _layer_of(dotted: str) -> int | None:
    parts = dotted.split(".")
    if parts[0] != "storage_engine" or len(parts) < 2:
        return None
    for i, names in enumerate(LAYERS):
        if parts[1] in names:
            return i
    return None


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "storage_engine":
                for alias in node.names:
                    yield f"storage_engine.{alias.name}", node.lineno
            else:
                yield node.module, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno


def _engine_modules():
    for path in sorted(ENGINE.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        dotted = ".".join(rel.parts)
        if dotted.endswith(".__init__"):
            dotted = dotted[: -len(".__init__")]
        yield path, dotted


def test_nothing_imports_a_higher_layer():
    upward = []
    for path, dotted in _engine_modules():
        own = _layer_of(dotted)
        if own is None:  # storage_engine/__init__.py and __main__.py sit above every layer
            continue
        for imported, line in _imports(path):
            target = _layer_of(imported)
            if target is not None and target > own:
                upward.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def test_the_engine_imports_neither_airflow_nor_spark():
    found = [f"{path.relative_to(REPO)}:{line} imports {imported}"
             for path, _ in _engine_modules() for imported, line in _imports(path)
             if imported.split(".")[0] in ("airflow", "pyspark", "py4j")]
    assert not found, "\n".join(found)
    code = "import sys, storage_engine; print(sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_a_lower_layer_loads_only_what_it_uses():
    """The package's public names load on first use: importing the record layer in a fresh interpreter loads
    neither the jobs layer nor PyYAML (a Spark executor reading batches needs neither)."""
    code = ("import sys, storage_engine.record.records\n"
            "print(sorted(m for m in sys.modules if m == 'yaml' or m.startswith(('yaml.', 'storage_engine.jobs',"
            " 'storage_engine.log', 'storage_engine.inspection', 'storage_engine.config'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    # and the names still resolve, on first use, to the modules that define them
    code = "import storage_engine as s; print(s.compact.__module__, s.verify_log_dirs.__module__, 'load_config' in dir(s))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["storage_engine.jobs.compaction", "storage_engine.inspection.verify", "True"]


def test_an_unknown_name_is_an_attribute_error():
    name = "no_such_name"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        getattr(storage_engine, name)


def test_every_public_name_resolves():
    missing = [name for name in storage_engine.__all__ if not hasattr(storage_engine, name)]
    assert not missing
    assert storage_engine.LogManager.__module__ == "storage_engine.log.manager"
    assert issubclass(storage_engine.PartitionNotFoundError, storage_engine.InvalidRequestError)
    assert not issubclass(storage_engine.InvalidRecordError, storage_engine.CorruptRecordError)


def test_the_readme_example_runs(tmp_path):
    """The Python API example of the README, run against a fresh log dir."""
    readme = (REPO / "README.md").read_text()
    start = readme.index("```python\nimport storage_engine")
    code = readme[start + len("```python\n"): readme.index("```", start + 10)]
    config_file = tmp_path / "storage.yaml"
    config_file.write_text(f"broker:\n  log.dirs: [{tmp_path / 'logs'}]\n")
    code = code.replace('"include/config/storage.yaml"', repr(str(config_file)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("0 b'u1' b'a@example.com'")


def test_the_readme_layout_table_names_every_engine_module():
    """README's layout table is the map a newcomer reads: every engine source file is named in its folder's row."""
    rows = {}
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("| `storage_engine/"):
            folder = line.split("`")[1]
            rows[folder] = line
    missing = []
    for path in sorted(ENGINE.rglob("*")):
        package_init = path.name == "__init__.py" and path.parent != ENGINE
        if path.suffix not in (".py", ".c", ".h") or "vendor" in path.parts or package_init \
                or path.name == "__main__.py":
            continue
        folder = path.parent.relative_to(REPO).as_posix() + "/"
        if f"`{path.name}`" not in rows.get(folder, ""):
            missing.append(path.relative_to(REPO).as_posix())
    assert rows, "README.md has no layout rows for storage_engine/"
    assert not missing, "engine files the README's layout table does not name: " + ", ".join(missing)


# The compiled extension is private to the record layer: one module chooses between it and the pure kernels.
PRIVATE_IMPORT_ALLOWED = {("storage_engine/record/kernels.py", "storage_engine.record._speedups")}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports(path: pathlib.Path):
    """Every import in ``path`` of a name or module spelled with a leading underscore: (line, dotted name)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if any(_is_private(part) for part in dotted.split(".")):
                    yield node.lineno, dotted
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(_is_private(part) for part in alias.name.split(".")):
                    yield node.lineno, alias.name


def test_no_module_imports_another_modules_private_name():
    """A leading underscore means "this module's own": the engine, the Airflow plugins and the Spark jobs import
    only public names of each other, so a reader can tell what each module offers from its names."""
    found = []
    for top in ("storage_engine", "plugins", "spark_jobs", "dags"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for line, dotted in _private_imports(path):
                if (rel, dotted) not in PRIVATE_IMPORT_ALLOWED:
                    found.append(f"{rel}:{line} imports {dotted}")
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_the_private_import_check_sees_every_spelling(tmp_path):
    """The scan above catches a private name, a private module and a private package, and lets public ones pass."""
    source = tmp_path / "m.py"
    source.write_text("from a.b import _c\nfrom a._b import c\nimport a._b.c\nfrom a import b, __version__\n")
    assert [d for _, d in _private_imports(source)] == ["a.b._c", "a._b.c", "a._b.c"]


# What the programs above the engine may reach into. Airflow's plugins drive whole jobs and read inspection, over
# the base modules; they never touch a log, a segment or a mechanism directly. The Spark job reads segment files
# and the record layer, and shares with the cleaner the key map's format (maintenance.offset_map) and the rule
# for aborted transactions (maintenance.txn_cleaning); it never takes part in the log's locking (log/), and runs no
# job or command. For a tiered topic it reads the remote segments below the local log start through the remote
# reader (tiered.reads, its cache module, tiered.object_store) and learns them through tiered.whole_log's read-only
# open.
BASE = {"errors", "layout", "durable", "clock", "config_keys", "config", "config_file", "units", "topic_store",
        "masking"}
CLIENT_ALLOWED = {
    "plugins": BASE | {"jobs", "inspection"},
    "dags": BASE | {"jobs", "inspection"},
    "spark_jobs": BASE | {"record", "segment", "inspection", "maintenance.offset_map", "maintenance.txn_cleaning",
                          "tiered.reads", "tiered.cache", "tiered.object_store", "tiered.whole_log"},
}


@pytest.mark.parametrize("top", sorted(CLIENT_ALLOWED))
def test_airflow_and_spark_reach_only_their_layers_of_the_engine(top):
    allowed = CLIENT_ALLOWED[top]
    found = []
    for path in sorted((REPO / top).rglob("*.py")):
        for imported, line in _imports(path):
            parts = imported.split(".")
            if parts[0] != "storage_engine" or len(parts) < 2:
                continue
            if parts[1] not in allowed and ".".join(parts[1:3]) not in allowed:
                found.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    assert not found, f"{top} reaches past {sorted(allowed)}:\n" + "\n".join(found)
