"""What every page of ``/storage-maintenance`` shares, written once for the Storage view (:mod:`.storage_view`)
and the console (:mod:`.console`): the URL prefix, the Jinja environment and its filters, rendering a page, the
hook that reads the store, engine errors as HTTP answers, and values as plain JSON.

Imports nothing of the pages, so the pages import it and :mod:`.app` joins them: no import circle.
"""
from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException
from fastapi.responses import HTMLResponse

from ..tasks.hooks import StorageEngineHook, epoch_ms, iso_ms

if TYPE_CHECKING:
    import jinja2

PREFIX = "/storage-maintenance"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")

_ENV: jinja2.Environment | None = None


def hook() -> StorageEngineHook:
    """The storage config the DAGs use: the ``storage_engine_default`` connection, else the environment."""
    return StorageEngineHook()


def render(name: str, **values: Any) -> HTMLResponse:
    """The page of template ``name`` with ``values`` (and ``prefix``, the URL prefix of every link)."""
    global _ENV
    if _ENV is None:
        _ENV = _env()
    return HTMLResponse(_ENV.get_template(name).render(**values))


def _env() -> jinja2.Environment:
    import jinja2

    from storage_engine.units import human_bytes

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.ChainableUndefined)
    env.filters["bytes"] = human_bytes
    env.filters["ms"] = lambda v: "" if v is None or v < 0 else iso_ms(int(v))
    env.filters["pct"] = lambda v: "" if v is None else f"{100 * v:.1f}%"
    env.filters["when"] = lambda v: v.strftime("%Y-%m-%d %H:%M:%S UTC") if hasattr(v, "strftime") else (v or "")
    env.filters["duration"] = duration
    env.filters["config_value"] = config_value
    env.globals["prefix"] = PREFIX
    return env


def duration(ms: int | float | None) -> str:
    """Milliseconds as people read them: ``3 d``, ``1.5 h``, ``250 ms``."""
    if ms is None:
        return ""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if abs(ms) >= size:
            value = ms / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{ms:.0f} ms"


def config_value(value: str | None, name: str) -> str:
    """A config value (as the engine prints it: :func:`storage_engine.config_keys.config_text`) with its meaning
    where the raw number hides it (``259200000 (3 d)``, ``262144 (256 KiB)``)."""
    from storage_engine.units import human_bytes

    if value is None:
        return "null"
    try:
        number = int(value)
    except ValueError:
        return value
    if number in (-1, 2**63 - 1) and (name.endswith(".ms") or name.endswith(".bytes") or name.endswith(".messages")):
        return f"{value} (unlimited)" if number == -1 or name != "max.compaction.lag.ms" else f"{value} (never)"
    if name.endswith(".ms") and number >= 1000:
        return f"{value} ({duration(number)})"
    if name.endswith(".bytes") and number >= 1024:
        return f"{value} ({human_bytes(number)})"
    return value


def instant_ms(value: str, name: str) -> int:
    """Query parameter ``name``: ``2026-01-01T12:00`` / ``...Z`` / epoch ms -> epoch ms (UTC when no zone is
    given); 422 naming it otherwise."""
    if value.strip().lstrip("-").isdigit():
        return int(value)
    try:
        when = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(422, f"{name} must be an ISO date-time or epoch milliseconds, got {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return epoch_ms(when)


def engine_errors(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An engine call with its errors as HTTP answers: a missing partition 404, anything else the engine refuses
    422 naming the error."""
    from storage_engine.errors import PartitionNotFoundError, StorageError

    try:
        return call(*args, **kwargs)
    except PartitionNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    except (StorageError, ValueError) as exc:
        raise HTTPException(422, f"{type(exc).__name__}: {exc}") from exc


# What the listener measures while it runs: a stopped or silent listener's last figures are history, not now.
LISTENER_LIVE_FIGURES = ("connections", "produce_records_per_s", "produce_bytes_per_s", "fetch_bytes_per_s")


def listener_shown(listener: dict | None) -> dict | None:
    """The listener's status (:func:`storage_engine.inspection.listener.listener_status`) as the pages show it:
    ``last_seen_ms`` is when it last wrote its status; unless it is ``running``, its connections and rates are None
    (a stopped listener has none; one not responding has none we know of) and what it last reported is kept
    under ``last_figures``, so no page shows a stopped listener's last rates as current."""
    if listener is None:
        return None
    shown = {**listener, "last_seen_ms": listener.get("updated_ms")}
    if listener.get("state") != "running":
        shown["last_figures"] = {k: listener.get(k) for k in LISTENER_LIVE_FIGURES}
        shown.update({k: None for k in LISTENER_LIVE_FIGURES})
    return shown


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON: datetimes as ISO strings, tuples as lists, tuple keys joined by ``-``
    (``("events", 0)`` -> ``events-0``), bytes as text (UTF-8) or ``{"hex": ...}``."""
    if isinstance(value, dict):
        return {"-".join(map(str, k)) if isinstance(k, tuple) else str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return {"hex": bytes(value).hex()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def parse_key(key: str | None, key_format: str) -> bytes | None:
    """A record key typed in a form: ``text`` (UTF-8) or ``hex`` (spaces allowed); None for no key; 422 naming
    what was wrong."""
    if key is None or key == "":
        return None
    if key_format == "hex":
        try:
            return bytes.fromhex(key.replace(" ", ""))
        except ValueError:
            raise HTTPException(422, f"key is not hex: {key!r}") from None
    if key_format != "text":
        raise HTTPException(422, f"key_format must be text or hex, got {key_format!r}")
    return key.encode("utf-8")
