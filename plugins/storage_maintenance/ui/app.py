"""The web app of ``/storage-maintenance`` inside Airflow's api-server: the Storage view's pages
(:mod:`.storage_view`), the console's (:mod:`.console`), the topic search (:mod:`.search`), the admin actions
(:mod:`.admin`) and the ACL page (:mod:`.acls_page`), behind Airflow's login (every route depends on ``get_user``:
401 without a token).
"""
from __future__ import annotations

from fastapi import Depends, FastAPI

from airflow.api_fastapi.core_api.security import get_user

from . import acls_page, admin, console, search, storage_view
from .web import PREFIX

__all__ = ["PREFIX", "app"]

app = FastAPI(title="Storage maintenance", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None,
              openapi_url=None)
app.include_router(storage_view.router)
app.include_router(console.router)
app.include_router(acls_page.router)
app.include_router(search.router)
app.include_router(admin.router)
