"""Kafka's default partitioner for keyed records: ``murmur2`` and the partition a key goes to.

Kafka's Java producer (``BuiltInPartitioner.partitionForKey``), kafka-python's ``DefaultPartitioner``, kafkajs's
default and librdkafka's ``murmur2_random`` all send a record with a non-null key to
``toPositive(murmur2(key)) % numPartitions``, where ``toPositive`` clears the sign bit (``& 0x7fffffff``: not
``abs``, so ``Integer.MIN_VALUE`` maps to 0). librdkafka's own default (``consistent_random``) is CRC32 instead,
so records of a confluent-kafka producer left at its default land elsewhere: a search by key falls back to
scanning every partition for them.

Used by the tiered storage's metadata partitioner (:mod:`storage_engine.tiered.metadata`), the sample data and
the console's search by key.
"""
from __future__ import annotations

__all__ = ["murmur2", "to_positive", "default_partition"]

_M32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (32-bit MurmurHash2, seed 0x9747b28c), as a signed 32-bit int (Java's ``int``)."""
    length = len(data)
    h = (_SEED ^ length) & _M32
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _M32
        k ^= k >> 24
        k = (k * _M) & _M32
        h = ((h * _M) & _M32) ^ k
    tail = length - length % 4
    if length % 4 == 3:
        h ^= data[tail + 2] << 16
    if length % 4 >= 2:
        h ^= data[tail + 1] << 8
    if length % 4 >= 1:
        h ^= data[tail]
        h = (h * _M) & _M32
    h ^= h >> 13
    h = (h * _M) & _M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's ``Utils.toPositive``: the sign bit cleared."""
    return value & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a record with ``key`` among ``num_partitions``."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
