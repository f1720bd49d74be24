"""``acls``: the ACLs the broker's authorizer reads (the ACL file in the first log dir) and its settings, as JSON
(:func:`storage_engine.inspection.acls.acl_listing`). Read-only: no lock is taken and nothing is written, so it
runs beside a serving broker. A damaged ACL file is an error naming the file (exit 2), never an empty list."""
from __future__ import annotations

import argparse

from storage_engine.cli.args import print_json
from storage_engine.config import StorageConfig


def cmd_acls(args: argparse.Namespace, config: StorageConfig) -> int:
    from storage_engine.inspection.acls import acl_listing
    print_json(acl_listing(config, principal=args.principal, resource_type=args.resource_type))
    return 0
