"""One segment's files and the log dir's small files: ``.log`` records, ``.index``/``.timeindex``, checkpoints, the clean-shutdown marker."""
