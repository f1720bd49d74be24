"""A second process publishing remote segment states to ``__remote_log_metadata`` of the store in ``argv[1]``: for
segments 0, 1, 2, ... of topic ``argv[2]`` (topic id ``argv[3]``, partition 0, 10 offsets each) COPY_SEGMENT_STARTED
then COPY_SEGMENT_FINISHED, ``argv[4]`` segments (0: forever), printing ``published <segment> <state>`` after each
record is durable. Run by path; imports nothing from the tests package."""
from __future__ import annotations

import sys
import uuid

from storage_engine.config_file import config_from_mapping
from storage_engine.log.manager import LogManager
from storage_engine.tiered.metadata import COPY_SEGMENT_FINISHED, RemoteSegment
from storage_engine.tiered.remote_log import RemoteLogMetadata

PARTITIONS = 5


def main() -> None:
    log_dir, topic, topic_id, count = sys.argv[1], sys.argv[2], uuid.UUID(sys.argv[3]), int(sys.argv[4])
    mgr = LogManager.open(config_from_mapping({"broker": {"log.dirs": log_dir}}))
    topic_meta = RemoteLogMetadata(PARTITIONS)
    n = 0
    while count == 0 or n < count:
        segment = RemoteSegment(topic, topic_id, 0, uuid.uuid4(), n * 10, n * 10 + 9, 1000 + n, 2000 + n, 1,
                                {0: n * 10}, 4096)
        topic_meta.publish(mgr, segment)
        print(f"published {n} 0", flush=True)
        topic_meta.publish(mgr, segment.update(COPY_SEGMENT_FINISHED, 3000 + n))
        print(f"published {n} 1", flush=True)
        n += 1
    mgr.close()


if __name__ == "__main__":
    main()
