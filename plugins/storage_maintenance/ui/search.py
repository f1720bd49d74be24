"""The console's search, exports and live tail (:mod:`storage_engine.inspection.search` does the reading).

Pages and endpoints, all behind Airflow's login like the rest of ``/storage-maintenance``:

* ``/search?topic=&key=&text=&field=&header=`` the search page. With a key, the partition Kafka's default
  partitioner picks for it is read first (in every topic when no topic is given); only if it holds no record of
  the key is every other partition read. The page's script reads the partitions one bounded step at a time
  (``/api/search/step``) and shows partitions done / total as it goes; each result links to the message browser
  at its offset. The search box on the landing page and on each topic page leads here;
* ``/api/search`` the whole search as JSON, ``/api/search/export?as=json|csv`` as a download (at most
  :data:`MAX_EXPORT` records);
* ``/api/export/messages/<topic>/<partition>?as=json|csv`` one page of the message browser as a download;
* ``/api/tail/<topic>/<partition>?after=<offset>`` the records from ``after`` on: the message browser's live tail
  asks for them every second and appends them to its table.

Every value shown or exported passes through the console's masking (:func:`.masking.masker_for`) for the user
asking, before the filters see it: a search by value cannot find what the user may not read.
"""
from __future__ import annotations

import csv
import io
import json
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from airflow.api_fastapi.core_api.security import GetUserDep

from .masking import masker_for
from .web import engine_errors, hook, instant_ms, jsonable, parse_key, render

if TYPE_CHECKING:
    from storage_engine.config import StorageConfig
    from storage_engine.inspection.browse import BrowsedRecord
    from storage_engine.inspection.search import Filters, SearchStep

router = APIRouter()
MAX_SHOWN = 16 * 1024              # bytes of a key or value shown in a result row
MAX_EXPORT = 100_000               # records of one export
TAIL_LIMIT = 200                   # records per tail answer
CSV_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "key_format", "value",
               "value_format", "headers", "producer_id", "producer_epoch", "sequence", "txn", "control")

Fields = Annotated[list[str], Query(description="JSON field filters: path=value or path (present)")]
Headers = Annotated[list[str], Query(description="header filters: name=value or name (present)")]


# -- masking --------------------------------------------------------------------------------------------------------

def masker(config: StorageConfig, user: object | None) -> Callable[[str, BrowsedRecord], BrowsedRecord]:
    """(topic, record) -> the record as ``user`` may read it (the console's masking rules), its value bytes."""
    mask = masker_for(config, user)

    def view(topic: str, record: BrowsedRecord) -> BrowsedRecord:
        shown: Any = mask(topic, dict(record))
        if isinstance(shown.get("value"), str):
            shown["value"] = shown["value"].encode("utf-8")
        return shown
    return view


# -- requests -------------------------------------------------------------------------------------------------------

def _filters(text: str | None, field: list[str], header: list[str]) -> Filters:
    from storage_engine.inspection.search import parse_filters
    filters: Filters = engine_errors(parse_filters, text, field, header)
    return filters


def _topics(config: StorageConfig, topic: str | None) -> list[str]:
    """The topics searched: ``topic``, or every topic that is not the broker's own (``__...``)."""
    from storage_engine.inspection import topics
    if topic:
        if not any(r["topic"] == topic for r in engine_errors(topics.list_topics, config)):
            raise HTTPException(404, f"no topic {topic!r} in the log dirs {list(config.log_dirs)}")
        return [topic]
    return [r["topic"] for r in engine_errors(topics.list_topics, config) if not r["internal"] and r["partitions"]]


def _row(topic: str, partition: int, record: BrowsedRecord) -> dict:
    from storage_engine.inspection.browse import render_bytes
    return {**record, "topic": topic, "partition": partition, "key_shown": render_bytes(record["key"], "auto", MAX_SHOWN),
            "value_shown": render_bytes(record["value"], "auto", MAX_SHOWN),
            "headers_shown": [(k, render_bytes(v, "auto", 4096)) for k, v in record["headers"]]}


# -- pages and steps ------------------------------------------------------------------------------------------------

@router.get("/search", response_class=HTMLResponse)
def search_page(topic: str = "", key: str | None = None, key_format: str = "text", text: str | None = None,
                field: Fields = [], header: Headers = [], every_partition: bool = False,
                limit: Annotated[int, Query(ge=1, le=500)] = 100) -> HTMLResponse:
    """The search page: its form, and the partitions the search will read (its script reads them)."""
    from storage_engine.inspection import search, topics
    config = hook().config
    key_bytes = parse_key(key, key_format)
    filters = _filters(text, field, header)
    asked = key_bytes is not None or not filters.empty
    targets = engine_errors(search.plan, config, _topics(config, topic), key_bytes) if asked else []
    names = [r["topic"] for r in engine_errors(topics.list_topics, config) if not r["internal"]]
    fields, headers = [f for f in field if f.strip()], [h for h in header if h.strip()]
    filter_query = urllib.parse.urlencode(
        [("key", key or ""), ("key_format", key_format)] * (key_bytes is not None) + [("text", text)] * bool(text)
        + [("field", f) for f in fields] + [("header", h) for h in headers])
    query = urllib.parse.urlencode([("topic", topic), ("limit", limit)] + [("every_partition", "true")] * every_partition)
    return render("search.html", nav="/", topic=topic, key=key or "", key_format=key_format, text=text or "",
                  fields=fields, headers=headers, every_partition=every_partition, limit=limit, asked=asked,
                  targets=targets, topics=names, filter_query=filter_query, query=query + "&" + filter_query)


@router.get("/api/search/step")
def api_search_step(user: GetUserDep, topic: str, partition: int, offset: int | None = None, key: str | None = None,
                    key_format: str = "text", text: str | None = None, field: Fields = [], header: Headers = [],
                    limit: Annotated[int, Query(ge=1, le=500)] = 100) -> JSONResponse:
    """One bounded step of a search in one partition: the matches (masked, rendered) and where to go on."""
    from storage_engine.inspection import search
    config = hook().config
    page = engine_errors(search.scan_partition, config, topic, partition, key=parse_key(key, key_format),
                         filters=_filters(text, field, header), offset=offset, limit=limit, view=masker(config, user))
    return JSONResponse(jsonable({
        "topic": topic, "partition": partition, "records": [_row(topic, partition, r) for r in page["records"]],
        "next_offset": page["next_offset"], "bytes_scanned": page["bytes_scanned"], "error": page["error"],
        "log_start_offset": page["log_start_offset"], "log_end_offset": page["log_end_offset"]}))


def _search_steps(user: object | None, topic: str, key: str | None, key_format: str, text: str | None,
                  field: list[str], header: list[str], every_partition: bool, limit: int) -> Iterator[SearchStep]:
    """A whole search's steps (:func:`storage_engine.inspection.search.search`) for ``user``, records masked. The
    request is checked here, before the first step, so a refused search is an HTTP error, not a broken download."""
    from storage_engine.inspection import search
    config = hook().config
    key_bytes, filters = parse_key(key, key_format), _filters(text, field, header)
    if key_bytes is None and filters.empty:
        raise HTTPException(422, "a search needs a key or a filter (value text, a JSON field or a header)")
    names = _topics(config, topic)
    return search.search(config, names, key=key_bytes, filters=filters, limit=limit,
                         every_partition=every_partition, view=masker(config, user))


def _whole(steps: Iterator[SearchStep]) -> dict:
    """The records of a search with their topic and partition, and what was read of each partition."""
    records: list[dict] = []
    partitions: dict[tuple[str, int], dict] = {}
    for step in engine_errors(list, steps):
        records.extend({"topic": step["topic"], "partition": step["partition"], **r} for r in step["records"])
        done = partitions.setdefault((step["topic"], step["partition"]), {
            "topic": step["topic"], "partition": step["partition"], "preferred": step["preferred"],
            "bytes_scanned": 0, "matches": 0, "error": None})
        done["bytes_scanned"] += step["bytes_scanned"]
        done["matches"] += len(step["records"])
        done["error"] = step["error"]
    return {"records": records, "partitions": list(partitions.values())}


def _records(steps: Iterator[SearchStep]) -> Iterator[dict]:
    for step in steps:
        for r in step["records"]:
            yield {"topic": step["topic"], "partition": step["partition"], **r}


@router.get("/api/search")
def api_search(user: GetUserDep, topic: str = "", key: str | None = None, key_format: str = "text",
               text: str | None = None, field: Fields = [], header: Headers = [],
               every_partition: bool = False, limit: Annotated[int, Query(ge=1, le=MAX_EXPORT)] = 500) -> JSONResponse:
    """A whole search: every matching record (at most ``limit``), and the partitions read."""
    data = _whole(_search_steps(user, topic, key, key_format, text, field, header, every_partition, limit))
    data["records"] = [_row(r["topic"], r["partition"], r) for r in data["records"]]
    data["limited"] = len(data["records"]) >= limit
    return JSONResponse(jsonable(data))


@router.get("/api/search/export")
def api_search_export(user: GetUserDep, topic: str = "", key: str | None = None, key_format: str = "text",
                      text: str | None = None, field: Fields = [], header: Headers = [],
                      every_partition: bool = False, limit: Annotated[int, Query(ge=1, le=MAX_EXPORT)] = MAX_EXPORT,
                      as_: Annotated[str, Query(alias="as")] = "json") -> Response:
    """A whole search as a download, streamed as the search reads: JSON (a list of records) or CSV
    (:data:`CSV_COLUMNS`)."""
    _check_format(as_)
    steps = _search_steps(user, topic, key, key_format, text, field, header, every_partition, limit)
    name = "search-" + (topic or "all-topics") + (f"-key-{key}" if key else "")
    return _download(_records(steps), name, as_)


# -- exports and the tail -------------------------------------------------------------------------------------------

def _check_format(as_: str) -> None:
    if as_ not in ("json", "csv"):
        raise HTTPException(422, f"as must be json or csv, got {as_!r}")


def _text_and_format(data: bytes | None) -> tuple[str, str]:
    if data is None:
        return "", "null"
    try:
        return data.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return data.hex(), "hex"


def exported(record: dict) -> dict:
    """One record as an export holds it: key, value and header values as UTF-8 text or ``{"hex": ...}``."""
    out = {k: record.get(k) for k in CSV_COLUMNS if k not in ("key_format", "value_format")}
    out["headers"] = [[k, v] for k, v in record["headers"]]
    return jsonable(out)


def csv_text(records: Iterable[dict]) -> Iterator[str]:
    """CSV of ``records``: a header line, then one line per record; bytes that are not UTF-8 as hex (``*_format``
    says which), headers as a JSON list of [name, value] pairs."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_COLUMNS)
    for r in records:
        key, key_format = _text_and_format(r["key"])
        value, value_format = _text_and_format(r["value"])
        writer.writerow([r["topic"], r["partition"], r["offset"], r["timestamp"], r["timestamp_type"], key, key_format,
                         value, value_format, json.dumps(jsonable([[k, v] for k, v in r["headers"]])),
                         r["producer_id"], r["producer_epoch"], r["sequence"], r["txn"] or "", r["control"] or ""])
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    yield buf.getvalue()


def json_text(records: Iterable[dict]) -> Iterator[str]:
    """A JSON list of ``records`` (:func:`exported`), one record per line."""
    yield "["
    for i, r in enumerate(records):
        yield ("\n" if i == 0 else ",\n") + json.dumps(exported(r), ensure_ascii=False)
    yield "\n]\n"


def _download(records: Iterable[dict], name: str, as_: str) -> Response:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120]
    headers = {"Content-Disposition": f'attachment; filename="{safe}.{as_}"'}
    if as_ == "csv":
        return StreamingResponse(csv_text(records), media_type="text/csv; charset=utf-8", headers=headers)
    return StreamingResponse(json_text(records), media_type="application/json", headers=headers)


@router.get("/api/export/messages/{topic}/{partition}")
def api_export_page(user: GetUserDep, topic: str, partition: int, offset: int | None = None,
                    timestamp: str | None = None, key: str | None = None, key_format: str = "text",
                    latest: bool = False, isolation: str = "read_uncommitted",
                    limit: Annotated[int, Query(ge=1, le=500)] = 50,
                    as_: Annotated[str, Query(alias="as")] = "json") -> Response:
    """One page of the message browser (its query parameters) as a download, values whole and masked."""
    from storage_engine.inspection import browse
    _check_format(as_)
    config = hook().config
    view = masker(config, user)
    page = engine_errors(browse.browse, config, topic, partition, offset=offset,
                         timestamp_ms=instant_ms(timestamp, "timestamp") if timestamp else None,
                         key=parse_key(key, key_format), latest=latest, limit=limit, isolation=isolation)
    records = [{"topic": topic, "partition": partition, **view(topic, r)} for r in page["records"]]
    return _download(records, f"{topic}-{partition}-from-{page['start_offset']}", as_)


@router.get("/api/tail/{topic}/{partition}")
def api_tail(user: GetUserDep, topic: str, partition: int, after: Annotated[int, Query(ge=0)],
             limit: Annotated[int, Query(ge=1, le=500)] = TAIL_LIMIT) -> JSONResponse:
    """The records from offset ``after`` on (at most ``limit``; masked, rendered): the live tail's next rows.
    ``next`` is the offset to ask from next time."""
    from storage_engine.inspection import browse
    config = hook().config
    view = masker(config, user)
    page = engine_errors(browse.browse, config, topic, partition, offset=after, limit=limit)
    rows = [_row(topic, partition, view(topic, r)) for r in page["records"] if r["offset"] >= after]
    following = page["next_offset"] if page["next_offset"] is not None else max(after, page["log_end_offset"])
    return JSONResponse(jsonable({"topic": topic, "partition": partition, "records": rows, "next": following,
                                  "log_start_offset": page["log_start_offset"],
                                  "log_end_offset": page["log_end_offset"], "error": page["error"]}))
