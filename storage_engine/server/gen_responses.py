"""Writes :mod:`storage_engine.server.responses`: one ``TypedDict`` per response the broker serves, and one per
nested entry, generated from kio's response classes (themselves generated from Kafka's message schemas) over the
version range each API is served in (:data:`storage_engine.server.handlers.APIS`), as Kafka generates its message
classes from the same schemas. A handler annotated with one of them is checked by mypy: a misspelt key, a missing
required field or a value of the wrong type is a type error before it is a :class:`~storage_engine.server.protocol
.BuildError` at run time.

A field is required when every served version has it without a schema default; a field only some served versions
have, or one with a default, is ``NotRequired`` (:func:`storage_engine.server.protocol.build` drops the keys a
version lacks and still checks each version's required fields at run time). Value types are those handlers give
:func:`~storage_engine.server.protocol.build`: ``int`` for integers and for durations and times in milliseconds,
``ErrorCode`` for error codes, ``bytes``, ``str``, ``bool``, ``float``, ``uuid.UUID``, a ``Sequence`` of entries
for an array; ``| None`` where some served version allows null.

Run ``python -m storage_engine.server.gen_responses`` after serving a new API or version, or after a kio upgrade;
``tests/server/test_units.py`` fails while the files on disk differ from what this module writes."""
from __future__ import annotations

import dataclasses
import pathlib
import sys
import textwrap
from importlib.metadata import version as package_version

from kio.index import load_response_schema

from storage_engine.server.protocol import KioField, kio_fields

PACKAGE = pathlib.Path(__file__).parent / "responses"
_SCALARS = {"int8": "int", "int16": "int", "int32": "int", "int64": "int", "uint16": "int", "float64": "float",
            "timedelta_i32": "int", "timedelta_i64": "int", "datetime_i64": "int", "bool": "bool", "string": "str",
            "bytes": "bytes", "records": "bytes", "uuid": "uuid.UUID", "error_code": "ErrorCode"}


@dataclasses.dataclass
class _Field:
    types: set[str]
    versions: list[int]
    required_in: list[int]


@dataclasses.dataclass
class _Entity:
    name: str
    fields: dict[str, _Field]
    versions: list[int]


def _type_of(cls: type, f: KioField, entities: dict[str, _Entity], version: int) -> str:
    if f.struct is not None:
        _collect(f.struct, version, entities)
        text = f.struct.__name__
    else:
        if f.kind not in _SCALARS:
            raise TypeError(f"{cls.__module__}.{cls.__name__}.{f.name}: no Python type for kafka_type {f.kind!r}")
        text = _SCALARS[f.kind]
    if f.array:
        text = f"Sequence[{text}]"
    return f"{text} | None" if f.nullable else text


def _collect(cls: type, version: int, entities: dict[str, _Entity]) -> None:
    """Merge ``cls`` (one version's class) into ``entities``, its nested classes first-come."""
    entity = entities.setdefault(cls.__name__, _Entity(cls.__name__, {}, []))
    if version in entity.versions:
        return
    entity.versions.append(version)
    for f in kio_fields(cls):
        field = entity.fields.setdefault(f.name, _Field(set(), [], []))
        field.types.add(_type_of(cls, f, entities, version))
        field.versions.append(version)
        if f.required:
            field.required_in.append(version)


def _span(versions: list[int]) -> str:
    """``v3-7`` or ``v0, v2-4``."""
    runs: list[list[int]] = []
    for v in sorted(versions):
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"v{a}" if a == b else f"v{a}-{b}" for a, b in runs)


def _union(types: set[str]) -> str:
    nullable = any(t.endswith(" | None") for t in types)
    bare = sorted({t.removesuffix(" | None") for t in types})
    return " | ".join(bare + (["None"] if nullable else []))


def _render_entity(entity: _Entity) -> list[str]:
    lines = ["", "", f"class {entity.name}(TypedDict):",
             f'    """{entity.name} of versions {_span(entity.versions)}."""']
    for name, field in entity.fields.items():
        text = _union(field.types)
        required = sorted(field.required_in) == sorted(entity.versions)
        note = "" if sorted(field.versions) == sorted(entity.versions) else f"   # {_span(field.versions)}"
        lines.append(f"    {name}: {text if required else f'NotRequired[{text}]'}{note}")
    return lines


def served() -> dict[str, list[tuple[int, str, int, int]]]:
    """(api key, name, min version, max version) of each served API, by the handler module's last name
    (``groups``; ``versions`` for ApiVersions, which the handlers package answers itself; ``sasl`` for the two
    SASL APIs, which the connection answers)."""
    from storage_engine.server.handlers import APIS     # here, not at the top: handlers import what this writes
    out: dict[str, list[tuple[int, str, int, int]]] = {}
    for api in sorted(APIS.values(), key=lambda a: a.key):
        module = "sasl" if api.handler is None else api.handler.__module__.rpartition(".")[2]
        out.setdefault("versions" if module == "handlers" else module, []).append(
            (api.key, api.name, api.min_version, api.max_version))
    return out


def render() -> dict[str, str]:
    """The text of each module of :mod:`storage_engine.server.responses`, by file name."""
    files: dict[str, str] = {}
    kio_version = package_version("kio")
    for module, apis in served().items():
        seen: dict[str, str] = {}             # names are per module: produce and fetch both have LeaderIdAndEpoch
        entities: dict[str, _Entity] = {}
        for key, api_name, low, high in apis:
            own: dict[str, _Entity] = {}      # per API: two APIs may name different entries alike
            for v in range(low, high + 1):
                _collect(load_response_schema(key, v), v, own)
            for name in own:
                if name in seen:
                    raise ValueError(f"{name} is generated for both {seen[name]} and {api_name}")
                seen[name] = api_name
            entities.update(own)
        body = [line for entity in entities.values() for line in _render_entity(entity)]
        text = "\n".join(body)
        served_list = ", ".join(f"{name} v{low}-{high}" for _key, name, low, high in apis)
        doc = textwrap.wrap(f'"""The responses of {served_list}: generated by ``python -m '
                            f"storage_engine.server.gen_responses`` from kio {kio_version}'s schemas; do not edit.\"\"\"",
                            width=116, break_on_hyphens=False)
        head = doc + ["from __future__ import annotations", ""]
        imports = []
        if "uuid.UUID" in text:
            imports.append("import uuid")
        if "Sequence[" in text:
            imports += ["from collections.abc import Sequence"] if not imports else ["", "from collections.abc "
                                                                                     "import Sequence"]
        typing_names = "NotRequired, TypedDict" if "NotRequired[" in text else "TypedDict"
        imports.append(f"from typing import {typing_names}")
        if "ErrorCode" in text:
            imports += ["", "from storage_engine.server.errors import ErrorCode"]
        files[f"{module}.py"] = "\n".join(head + imports + body) + "\n"
    names = ", ".join(f"``{m}``" for m in sorted(m.removesuffix(".py") for m in files))
    files["__init__.py"] = (f'"""Typed values of every response the broker serves, one module per handler module '
                            f'({names}):\ngenerated by ``python -m storage_engine.server.gen_responses``; do not edit."""\n')
    return files


def stale() -> list[str]:
    """The files of :mod:`storage_engine.server.responses` that differ from :func:`render` (missing, changed, or
    not generated)."""
    wanted = render()
    present = {p.name for p in PACKAGE.glob("*.py")} if PACKAGE.is_dir() else set()
    return sorted(name for name in wanted.keys() | present
                  if name not in wanted or not (PACKAGE / name).is_file()
                  or (PACKAGE / name).read_text() != wanted[name])


def main() -> int:
    files = render()
    PACKAGE.mkdir(exist_ok=True)
    for path in PACKAGE.glob("*.py"):
        if path.name not in files:
            path.unlink()
    for name, text in files.items():
        (PACKAGE / name).write_text(text)
    print(f"wrote {len(files)} modules to {PACKAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
