"""The API's own description, behind a token like every other read.

``/openapi.json`` answers a user's token (any role: it describes the routes, not anyone's
data, but it is not for whoever reaches the port). A browser cannot send a bearer header, so
the interactive page lives in the console, behind its session: ``/console/docs`` reads
``/console/openapi.json``; ``/docs`` sends a browser there (to sign in first).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from corral.services.api.auth import caller
from corral.services.api.console.auth import require_session

router = APIRouter(include_in_schema=False)
console = APIRouter(
    prefix="/console", include_in_schema=False, dependencies=[Depends(require_session)]
)
TITLE = "Corral API"


@router.get("/openapi.json", dependencies=[Depends(caller)])
def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs")
def docs() -> RedirectResponse:
    return RedirectResponse("/console/docs", 303)


@console.get("/openapi.json")
def console_openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@console.get("/docs")
def console_docs() -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="/console/openapi.json", title=TITLE)
