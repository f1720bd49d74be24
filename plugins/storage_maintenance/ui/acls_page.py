"""The Storage view's ACL page: ``/acls`` lists the ACLs the broker's authorizer reads (the ACL file in the first
log dir, :func:`storage_engine.inspection.acls.acl_listing`), filtered by principal and resource type, with the
authorizer's settings (``authorizer.class.name``, ``super.users``, ``allow.everyone.if.no.acl.found``) above
them; ``/api/acls`` the same as JSON. Read-only: ACLs are changed through Kafka's CreateAcls and DeleteAcls on the
broker, which answers them only once the file is on disk.

A damaged ACL file is shown as the error naming the file (the broker does not start on it), never as an empty
list. Its router joins the others on one app (:mod:`.app`), behind Airflow's login."""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, JSONResponse

from .web import hook, jsonable, render

router = APIRouter()


def acls_data(principal: str | None = None, resource_type: str | None = None) -> dict:
    """The listing, or ``{"error": ...}`` when the file cannot be read (damaged: the store's error names it) or a
    filter is not valid."""
    from storage_engine.errors import StorageError
    from storage_engine.inspection.acls import acl_listing

    h = hook()
    principal = principal or None
    resource_type = resource_type or None
    filters = {"principal": principal or "", "resource_type": resource_type or ""}
    try:
        listing = acl_listing(h.config, principal=principal, resource_type=resource_type)
    except (StorageError, ValueError) as exc:
        return {"error": str(exc), "acls": [], "filters": filters, "config_path": h.config_path}
    return {**listing, "filters": filters, "config_path": h.config_path}


@router.get("/acls", response_class=HTMLResponse)
def acls_page(principal: str | None = None, resource_type: str | None = None) -> HTMLResponse:
    return render("acls.html", nav="/acls", **acls_data(principal, resource_type))


@router.get("/api/acls")
def api_acls(principal: str | None = None, resource_type: str | None = None) -> JSONResponse:
    data = acls_data(principal, resource_type)
    return JSONResponse(jsonable(data), status_code=422 if "error" in data else 200)
