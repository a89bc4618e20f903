"""``/health``, ``/ready`` and ``/metrics``: whether the process answers, whether its knowledge base does (no key
needed for either, so that orchestrators can ask), and its Prometheus metrics (a read)."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from kbseek.interfaces.http.deps import CurrentRuntime, Kb, Read
from kbseek.observability.metrics import CONTENT_TYPE

router = APIRouter(tags=["operations"])


@router.get("/health", summary="Liveness: the process answers")
def health() -> dict[str, Any]:
    return {"status": "ok"}


@router.get("/ready", summary="Readiness: database, vector store and indexes loaded")
def ready(runtime: CurrentRuntime) -> JSONResponse:
    kb = runtime.opened
    if kb is None:
        return JSONResponse({"ready": False, "reason": runtime.reason or "starting", "checks": {}}, status_code=503)
    state = kb.readiness()
    return JSONResponse(
        {
            "ready": state["ready"],
            "degraded": state["degraded"],
            "ready_after_s": runtime.ready_after_s,
            "checks": state["checks"],
            "repaired_at_start": state["repaired_at_start"],
        },
        status_code=200 if state["ready"] else 503,
    )


@router.get("/metrics", summary="Prometheus metrics")
def metrics(_: Read, kb: Kb) -> Response:
    return Response(kb.metrics_exposition(), media_type=CONTENT_TYPE)
