"""One JSON-over-HTTP POST with timeouts and retries, shared by every client (chat models, retrieval servers).

Standard library only. Timeouts, connection errors, undecodable replies, 5xx and 429 answers are retried with
exponential backoff; other 4xx answers are not (repeating a wrong request cannot help). When every attempt fails it
raises :class:`~agentgym_turn.error.ServiceError` with the last error, which callers report instead of scoring 0.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from agentgym_turn.error import ServiceError


def post_json(
    url: str,
    body: Any,
    *,
    timeout: float,
    retries: int,
    backoff: float,
    headers: Mapping[str, str] | None = None,
    hint: str = "Check that the server is up.",
) -> Any:
    """POST ``body`` as JSON to ``url`` and return the decoded reply (see the module docstring for retries)."""
    data = json.dumps(body).encode()
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    errors: list[str] = []
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        req = urllib.request.Request(url, data=data, headers=all_headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            errors.append(f"HTTP {exc.code}: {exc.read()[:300]!r}")
            if exc.code < 500 and exc.code != 429:
                break
        except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    raise ServiceError(f"POST {url} failed after {len(errors)} attempt(s): {errors[-1]}. {hint}")


def send_json(handler: Any, payload: Any, status: int = 200) -> None:
    """The server side: write ``payload`` as a JSON response from a ``http.server.BaseHTTPRequestHandler``."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
