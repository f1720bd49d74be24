"""Keep the log dirs open (every partition) until standard input closes, as an application would.

    python holder.py --config CFG [--clean]

Prints ``READY`` once the logs are open; on end of input closes them (``--clean``: through ``LogManager.close``;
otherwise the process just exits, as one killed would leave them) and prints ``DONE``.
"""
from __future__ import annotations

import argparse
import os
import sys

from storage_engine.config_file import load_config
from storage_engine.log.manager import LogManager


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--clean", action="store_true")
    args = p.parse_args(argv)
    mgr = LogManager.open(load_config(args.config))
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    sys.stdin.read()
    if args.clean:
        mgr.close()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    if not args.clean:
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
