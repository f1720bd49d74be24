"""Read-only inspection of log dirs: nothing here takes a lock, repairs or writes. The operators' status of the log dirs
(:mod:`.status`), the audit (:mod:`.verify`), ``dump-log`` (:mod:`.dump`) and the facts about one partition that
programs outside the log-dir locking read (:mod:`.partitions`, for the Spark key-map job).
"""
