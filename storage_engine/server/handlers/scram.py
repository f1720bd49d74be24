"""DescribeUserScramCredentials (50), as Kafka's ``ScramImage.describe`` answers it, over the users of
``sasl.credentials.file`` (loaded when a listener uses SASL; none otherwise): each user's SCRAM mechanisms
(1 SCRAM-SHA-256, 2 SCRAM-SHA-512) with their iterations, a ``password`` entry counting for both with the 4096
iterations its credentials are derived with. No user named: every user with a SCRAM credential; a user named
twice DUPLICATE_RESOURCE, one without a SCRAM credential RESOURCE_NOT_FOUND, with Kafka's messages. DESCRIBE on
the cluster, else CLUSTER_AUTHORIZATION_FAILED for the whole request (and each user asked for, as Kafka).

AlterUserScramCredentials (51) is not served: the credentials are the operator's file, read at start."""
from __future__ import annotations

from typing import Any

from storage_engine.acl.model import CLUSTER_NAME, Operation, ResourceType
from storage_engine.server import access
from storage_engine.server.errors import ErrorCode
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.responses.scram import (CredentialInfo, DescribeUserScramCredentialsResponse,
                                                   DescribeUserScramCredentialsResult)

MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}     # Kafka's ScramMechanism.type()


async def describe_user_scram_credentials(ctx: Ctx, body: Any) -> DescribeUserScramCredentialsResponse:
    if not access.allowed(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # Kafka's getErrorResponse: the error at the top and once per user asked for (with no user name)
        refused = "Cluster authorization failed."
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": refused,
                "results": tuple({"user": "", "error_code": ErrorCode.cluster_authorization_failed,
                                  "error_message": refused, "credential_infos": ()} for _ in body.users or ())}
    users = ctx.broker.users
    credentials: dict[str, list[CredentialInfo]] = {}
    for (user, mechanism), cred in sorted((users.scram if users is not None else {}).items()):
        credentials.setdefault(user, []).append({"mechanism": MECHANISM_TYPES[mechanism],
                                                 "iterations": cred.iterations})
    named = [u.name for u in body.users] if body.users else sorted(credentials)
    results: list[DescribeUserScramCredentialsResult] = []
    for user in dict.fromkeys(named):
        if named.count(user) > 1:
            results.append({"user": user, "error_code": ErrorCode.duplicate_resource, "credential_infos": (),
                            "error_message": "Cannot describe SCRAM credentials for the same user twice in a single "
                                             f"request: {user}"})
        elif user not in credentials:
            results.append({"user": user, "error_code": ErrorCode.resource_not_found, "credential_infos": (),
                            "error_message": f"Attempt to describe a user credential that does not exist: {user}"})
        else:
            results.append({"user": user, "error_code": ErrorCode.none, "error_message": None,
                            "credential_infos": tuple(credentials[user])})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": tuple(results)}
