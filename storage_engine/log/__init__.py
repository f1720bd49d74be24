"""One partition's log and the set of logs: appends, reads, rolls, loading and recovery, cross-process locks."""
