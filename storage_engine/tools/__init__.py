"""Operator tools over log dirs: the command line, ``dump-log``, ``verify`` and read-only inspection."""
