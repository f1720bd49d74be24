"""The object store and remote log settings of one process, from the broker keys of tiered storage
(``remote.log.storage.system.enable``, Kafka's ``rlmm.config.`` metadata keys and the ``rsm.config.`` store keys named
as in Aiven's S3 RemoteStorageManager; see :data:`storage_engine.config_keys.BROKER_KEYS`).

With tiered storage enabled the store must be named: ``rsm.config.storage.s3.endpoint.url`` (http or https) and
``rsm.config.storage.s3.bucket.name`` are required, and the two credentials are given together or not at all (then
boto3's usual sources apply: the environment, ``~/.aws``). A :class:`ConfigError` names the key at fault. The secret
never appears in a ``repr`` or an error.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from storage_engine.config import StorageConfig, check_remote_store
from storage_engine.layout import REMOTE_LOG_INDEX_CACHE_DIR

__all__ = ["RemoteStorageSettings"]


@dataclass(frozen=True)
class RemoteStorageSettings:
    """Tiered storage's settings (see the module docstring); build one with :meth:`of`."""

    enabled: bool                      # remote.log.storage.system.enable
    endpoint_url: str | None           # rsm.config.storage.s3.endpoint.url
    bucket: str                        # rsm.config.storage.s3.bucket.name ("" when disabled and unset)
    region: str                        # rsm.config.storage.s3.region
    path_style: bool                   # rsm.config.storage.s3.path.style.access.enabled
    access_key_id: str | None = field(repr=False)        # rsm.config.storage.aws.access.key.id
    secret_access_key: str | None = field(repr=False)    # rsm.config.storage.aws.secret.access.key
    key_prefix: str = ""               # rsm.config.key.prefix, put before every object key
    metadata_partitions: int = 50      # rlmm.config.remote.log.metadata.topic.num.partitions
    cache_dir: str = ""                # rsm.config.fetch.chunk.cache.path (default <first log dir>/remote-log-index-cache)
    cache_bytes: int = 256 * 1024 * 1024             # rsm.config.fetch.chunk.cache.size
    index_cache_bytes: int = 1024 * 1024 * 1024      # remote.log.index.file.cache.total.size.bytes

    @classmethod
    def of(cls, config: StorageConfig) -> "RemoteStorageSettings":
        """The settings of ``config``'s broker keys; :class:`ConfigError` naming the key when tiered storage is
        enabled and the store is not named well enough to reach it."""
        r = config.remote
        enabled = bool(r.get("remote.log.storage.system.enable", False))
        endpoint = r.get("rsm.config.storage.s3.endpoint.url") or None
        bucket = r.get("rsm.config.storage.s3.bucket.name") or ""
        key_id = r.get("rsm.config.storage.aws.access.key.id") or None
        secret = r.get("rsm.config.storage.aws.secret.access.key") or None
        if enabled:
            check_remote_store(r)
        cache_dir = r.get("rsm.config.fetch.chunk.cache.path") or ""
        if cache_dir:
            base = os.path.dirname(os.path.abspath(config.source)) if config.source else os.getcwd()
            cache_dir = os.path.normpath(os.path.join(base, os.path.expanduser(cache_dir)))
        elif config.log_dirs:
            cache_dir = os.path.join(config.log_dirs[0], REMOTE_LOG_INDEX_CACHE_DIR)
        return cls(enabled=enabled, endpoint_url=endpoint, bucket=bucket,
                   region=r.get("rsm.config.storage.s3.region") or "us-east-1",
                   path_style=bool(r.get("rsm.config.storage.s3.path.style.access.enabled", True)),
                   access_key_id=key_id, secret_access_key=secret, key_prefix=r.get("rsm.config.key.prefix") or "",
                   metadata_partitions=int(r.get("rlmm.config.remote.log.metadata.topic.num.partitions", 50)),
                   cache_dir=cache_dir, cache_bytes=int(r.get("rsm.config.fetch.chunk.cache.size", 256 * 1024 * 1024)),
                   index_cache_bytes=int(r.get("remote.log.index.file.cache.total.size.bytes", 1024 ** 3)))
