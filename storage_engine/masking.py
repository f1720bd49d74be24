"""Masking rules: which record values a reader without the right to read them in clear sees masked.

The storage config's ``console:`` section lists them (read by :mod:`storage_engine.config_file`, checked here)::

    console:
      masking:
        - topic: user-emails          # a glob (fnmatch: * ? [..]) matched against the whole topic name
          fields: [email, profile.phone]   # JSON fields, dotted paths into nested objects
        - topic: "re:^audit-.*$"      # or a regular expression after "re:" (re.fullmatch)
          value: true                 # the whole value

Semantics (what a masked reader sees):

* a ``value: true`` rule replaces the whole value by :data:`MASK` (a tombstone stays a tombstone: None is no data);
* a ``fields`` rule parses the value as JSON and replaces each named field by :data:`MASK` wherever the path
  leads (through arrays too: ``contacts.email`` masks the ``email`` of every object in ``contacts``); a path that
  is absent masks nothing. A value that is not a JSON object or array (not UTF-8, not JSON, a bare string) is
  masked whole: the fields cannot be told apart in it, and showing it would show them;
* several rules may match one topic: their fields add up, and any ``value: true`` among them masks the value.

Keys and headers are never masked (they are what a reader searches and partitions by). The engine itself never
masks: the rules are for the consoles that show values to people (the Airflow plugin's Storage view); the CLI and
the Kafka listener serve the bytes as stored.
"""
from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage_engine.errors import ConfigError

__all__ = ["MASK", "MaskRule", "parse_masking", "rules_for", "mask_value"]

MASK = "****"
RULE_KEYS = ("topic", "fields", "value")
_REGEX_PREFIX = "re:"
_FIELD = re.compile(r"[^.\s]+(\.[^.\s]+)*")       # dot-separated, no empty segment, no whitespace


@dataclass(frozen=True)
class MaskRule:
    """One entry of ``console.masking``: the topics it covers (``topic``, a glob or ``re:`` regex) and what it
    masks: the whole value (``value``) or JSON ``fields`` (dotted paths, split)."""

    topic: str
    pattern: re.Pattern[str]
    fields: tuple[tuple[str, ...], ...] = ()
    value: bool = False

    def matches(self, topic: str) -> bool:
        return self.pattern.fullmatch(topic) is not None


def _pattern(raw: object, key: str) -> re.Pattern[str]:
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(f"{key} = {raw!r}: must be a topic name, a glob (user-*) or a regular expression "
                          f"after {_REGEX_PREFIX!r} (re:^user-.*$)")
    if raw.startswith(_REGEX_PREFIX):
        try:
            return re.compile(raw[len(_REGEX_PREFIX):])
        except re.error as exc:
            raise ConfigError(f"{key} = {raw!r}: not a valid regular expression: {exc}") from None
    return re.compile(fnmatch.translate(raw))


def _rule(index: int, raw: object) -> MaskRule:
    where = f"console.masking[{index}]"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: each rule must be a mapping with 'topic:' and 'fields:' or 'value: true', "
                          f"got {type(raw).__name__}")
    for name in raw:
        if name not in RULE_KEYS:
            raise ConfigError(f"{where}.{name}: unknown key; a rule has {', '.join(RULE_KEYS)}")
    if "topic" not in raw:
        raise ConfigError(f"{where}.topic: missing; name the topics the rule covers (a name, glob or re:regex)")
    pattern = _pattern(raw["topic"], f"{where}.topic")
    value = raw.get("value", False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.value = {value!r}: must be true or false")
    fields: tuple[tuple[str, ...], ...] = ()
    if "fields" in raw:
        listed = raw["fields"]
        if not isinstance(listed, list) or not listed:
            raise ConfigError(f"{where}.fields = {listed!r}: must be a non-empty list of JSON field paths "
                              "(email, profile.phone)")
        for i, name in enumerate(listed):
            if not isinstance(name, str) or not _FIELD.fullmatch(name):
                raise ConfigError(f"{where}.fields[{i}] = {name!r}: must be a JSON field name or a dotted path "
                                  "(profile.phone), without spaces or empty parts")
        fields = tuple(tuple(name.split(".")) for name in listed)
    if value and fields:
        raise ConfigError(f"{where}: has both 'value: true' and 'fields:'; the whole value is masked, so drop "
                          "'fields:' (or set value: false)")
    if not value and not fields:
        raise ConfigError(f"{where}: masks nothing; give 'fields: [...]' or 'value: true'")
    return MaskRule(topic=raw["topic"], pattern=pattern, fields=fields, value=value)


def parse_masking(raw: object) -> tuple[MaskRule, ...]:
    """The checked rules of ``console.masking`` (a YAML list; None or absent: no rules). ConfigError naming the
    key (``console.masking[1].fields[0]``) for anything else."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"console.masking: must be a list of rules ({{topic: ..., fields: [...]}} or "
                          f"{{topic: ..., value: true}}), got {type(raw).__name__}")
    return tuple(_rule(i, r) for i, r in enumerate(raw))


def rules_for(rules: tuple[MaskRule, ...], topic: str) -> tuple[bool, tuple[tuple[str, ...], ...]]:
    """What ``rules`` mask on ``topic``: (whole value, JSON field paths)."""
    whole = False
    fields: list[tuple[str, ...]] = []
    for rule in rules:
        if rule.matches(topic):
            whole = whole or rule.value
            fields.extend(f for f in rule.fields if f not in fields)
    return whole, tuple(fields)


def _mask_path(node: Any, path: tuple[str, ...]) -> bool:
    """Replace what ``path`` leads to in ``node`` by MASK (arrays: in each element); whether anything was."""
    if isinstance(node, list):
        hits = [_mask_path(item, path) for item in node]
        return any(hits)
    if not isinstance(node, dict) or path[0] not in node:
        return False
    if len(path) == 1:
        node[path[0]] = MASK
        return True
    return _mask_path(node[path[0]], path[1:])


def mask_value(value: bytes | str | None, whole: bool, fields: tuple[tuple[str, ...], ...]) -> bytes | str | None:
    """``value`` (bytes or text, as given) masked: MASK for ``whole``, else its JSON ``fields`` replaced by MASK
    (re-serialised compactly); a value that is not a JSON object/array is MASK. None (a tombstone) stays None."""
    if value is None or (not whole and not fields):
        return value
    as_bytes = isinstance(value, (bytes, bytearray))
    masked: str = MASK
    if not whole:
        try:
            doc = json.loads(bytes(value).decode("utf-8") if as_bytes else value)  # type: ignore[arg-type]
        except (UnicodeDecodeError, ValueError):
            doc = None
        if isinstance(doc, (dict, list)):
            for path in fields:
                _mask_path(doc, path)
            masked = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    return masked.encode("utf-8") if as_bytes else masked
