"""``/docs``: Swagger UI over the OpenAPI schema, from the files of the ``swagger-ui-bundle-v2`` package, so the page
works offline and under the console's Content-Security-Policy (its initializer is ``web/swagger-init.js``).

The schema declares the Bearer key as an optional security scheme (:func:`declare_bearer_key`), so "Authorize"
in the page sends it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, HTMLResponse
from swagger_ui_bundle import swagger_ui_path

from kbseek.interfaces.http.console import SECURITY_HEADERS
from kbseek.interfaces.http.guard import ApiError

# the only files of the bundle the page loads (the bundle's own index.html loads a demo API from the internet)
ASSETS = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript", "favicon-32x32.png": "image/png"}
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kbseek API</title>
<link rel="stylesheet" href="docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="docs/assets/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/assets/swagger-ui-bundle.js"></script>
<script src="swagger-init.js"></script>
</body>
</html>
"""
router = APIRouter()


@router.get("/docs", include_in_schema=False)
def docs() -> HTMLResponse:
    return HTMLResponse(PAGE, headers=SECURITY_HEADERS)


@router.get("/docs/assets/{name}", include_in_schema=False)
def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise ApiError(404, "not_found", f"no docs asset {name[:80]!r}")
    return FileResponse(swagger_ui_path / name, media_type=ASSETS[name], headers=SECURITY_HEADERS)


def declare_bearer_key(app: FastAPI) -> None:
    """Make ``app``'s OpenAPI schema declare the Bearer key, optional until the server sets one."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "KBSEEK_API_KEY for writes; KBSEEK_READ_API_KEY (or the write key) for "
                    "reads when it is set",
                }
            }
            schema["security"] = [{}, {"bearer": []}]  # a key is optional until the server sets one
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
