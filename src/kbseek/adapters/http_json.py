"""One JSON POST to a model server (embeddings, reranking), with the failure named and its secrets masked."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from kbseek.observability.redact import mask_url, redact

MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a reply larger than this is a broken server, not an answer


class HttpJsonError(Exception):
    """The server did not answer with JSON: unreachable, timed out, an HTTP error or a body that is not JSON.

    The message names the server by its masked URL and never holds the key."""


def post_json(url: str, payload: Any, *, api_key: str = "", timeout: float) -> Any:
    """POST ``payload`` as JSON to ``url`` (with a Bearer ``api_key`` when given) and return the decoded reply."""
    shown = mask_url(url)
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode("utf-8"), method="POST", headers={"Content-Type": "application/json"}
    )
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise HttpJsonError(f"{shown} answered HTTP {exc.code}") from exc
    except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors; ValueError: a malformed URL
        reason = getattr(exc, "reason", exc)
        raise HttpJsonError(f"{shown} failed: {redact(str(reason)) or type(exc).__name__}") from exc
    if len(body) > MAX_RESPONSE_BYTES:
        raise HttpJsonError(f"{shown} answered more than {MAX_RESPONSE_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise HttpJsonError(f"{shown} answered something that is not JSON") from exc
