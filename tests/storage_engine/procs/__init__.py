"""Child-process programs the cross-process tests start with ``python <file>`` (real processes, not threads)."""
