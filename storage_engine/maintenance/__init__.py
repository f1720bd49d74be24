"""Housekeeping mechanisms over one log: retention (:mod:`.retention`), compaction (the cleaner manager selects,
the cleaner cleans, the record filter does the per-record work, the transaction rules, key maps). The whole jobs that
drive them are in :mod:`storage_engine.jobs`.
"""
