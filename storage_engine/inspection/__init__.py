"""Read-only inspection of log dirs: nothing here takes a lock, repairs or writes. The operators' status of the log dirs
(:mod:`.status`, over the partition page :mod:`.listing`, one partition :mod:`.detail`, the offsets of
:mod:`.snapshot`, the plans of :mod:`.plans` and the Kafka listener :mod:`.listener`), the audit (:mod:`.verify`),
``dump-log`` (:mod:`.dump`) and the facts about one partition that programs outside the log-dir locking read
(:mod:`.partitions`, for the Spark key-map job).
"""
