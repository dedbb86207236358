"""Fixtures for the τ-bench env tests: the two domains' data and a local OpenAI-compatible HTTP server.

The server is real HTTP on 127.0.0.1 (standard library), answering ``POST /v1/chat/completions`` from a queue of
scripted replies. It exercises the chat client, the protocol, parsing and retries of the user simulator and the
judge; it says nothing about how good any model is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from envs.tau.data import DomainData, load_domain
from tests.http_server import send_json, serving


@pytest.fixture(scope="session")
def retail() -> DomainData:
    return load_domain("retail")


@pytest.fixture(scope="session")
def airline() -> DomainData:
    return load_domain("airline")


Reply = str | int | Callable[[dict[str, Any]], str]


@dataclass
class FakeOpenAI:
    """A tiny chat-completions server: each request pops the next reply (a str, an HTTP status, or a function of
    the request body); ``requests`` records every body received."""

    url: str
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    default: Reply | None = None

    def spec(self, model: str = "fake-model") -> str:
        return f"{self.url}#{model}"


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    state = FakeOpenAI(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(body)
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            reply = state.replies.pop(0) if state.replies else state.default
            if reply is None:
                self.send_error(500, "no scripted reply left")
                return
            if isinstance(reply, int):
                self.send_error(reply)
                return
            text = reply(body) if callable(reply) else reply
            send_json(self, {"choices": [{"message": {"role": "assistant", "content": text}}]})

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        state.url = f"{url}/v1"
        yield state
