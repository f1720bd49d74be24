"""Masking in the console: every value the Storage view shows (the message browser, search, export, the live
tail) passes through :func:`masker_for`, which applies the storage config's ``console.masking`` rules
(:mod:`storage_engine.masking`) unless the user may read values in clear.

The unmasked-read permission is Airflow's permission to **read connections** (``is_authorized_connection``
with method GET): whoever may read the secrets Airflow keeps may read the values in clear. With Airflow's
SimpleAuthManager that is the roles op and admin (viewer and user see masked values); with the FAB auth manager
the roles Op and Admin (``can_read`` on Connections). An anonymous request (no user) sees masked values.

A masked record says so: ``masked`` is ``"value"`` (the whole value) or the list of field paths the rules name
(``["email"]``), so a page can tell "masked" from "empty"; ``value_size`` is the stored value's size. A
transaction marker (``control``) is not masked: its value is the marker.

A filter on values (search) must match the records as the user sees them, masked: otherwise a search for
``email=ann@example.com`` would tell a masked reader what the masked field holds.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from storage_engine.config import StorageConfig
from storage_engine.masking import mask_value, rules_for

logger = logging.getLogger(__name__)

UNMASKED_PERMISSION = "read permission on Airflow's connections"

Masker = Callable[[str, dict], dict]


def may_read_unmasked(user: object | None) -> bool:
    """Whether ``user`` may read values in clear: Airflow's auth manager allows them to read connections."""
    if user is None:
        return False
    from airflow.api_fastapi.app import get_auth_manager

    try:
        return bool(get_auth_manager().is_authorized_connection(method="GET", user=user))
    except Exception:   # an auth manager that cannot judge this user: masked, never clear by accident
        logger.exception("storage console: could not check the unmasked-read permission; values are masked")
        return False


def _unmasked(topic: str, record: dict) -> dict:
    return record


def mask_record(config: StorageConfig, topic: str, record: dict) -> dict:
    """``record`` (a dict with ``value``: bytes, text or None) with its value masked by ``config``'s rules for
    ``topic``; a copy when anything is masked, ``record`` itself otherwise."""
    whole, fields = rules_for(config.masking, topic)
    if (not whole and not fields) or record.get("control"):   # a transaction marker's value is no one's data
        return record
    value = record.get("value")
    out = dict(record)
    out["value"] = mask_value(value, whole, fields)
    out["masked"] = "value" if whole else [".".join(f) for f in fields]
    out.setdefault("value_size", None if value is None else len(value))
    return out


def masker_for(config: StorageConfig, user: object | None) -> Callable[[str, dict], dict]:
    """The function (topic, record) -> record that every value shown to ``user`` passes through: the identity
    when no rule exists or the user may read unmasked, else :func:`mask_record` with ``config``'s rules."""
    if not config.masking or may_read_unmasked(user):
        return _unmasked

    def masked(topic: str, record: dict) -> dict:
        return mask_record(config, topic, record)

    return masked

