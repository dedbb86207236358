"""Fixtures for TurnRL/SearchR1-v2: a real Lucene index over the paper's Table 3/4 passages, and a scripted
OpenAI-compatible judge server (a real HTTP server with fixed replies: it tests the protocol, parsing and retries)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentgym_turn.corpus import Document

#: The passages shown in the paper's Table 3 and Table 4, text as printed there (none holds either gold answer).
TABLE_DOCS = [
    Document(
        "t3-1",
        "Succession to the British throne",
        "Catholics are eligible. Queen Elizabeth II is the sovereign, and her",
    ),
    Document(
        "t3-2",
        "Monarchy of the United Kingdom",
        "Monarchy of the United Kingdom The monarchy of the United Kingdom, commonly referred to as",
    ),
    Document(
        "t3-3",
        "Demise of the Crown",
        "the Crown. This erroneous meaning is undermined by the principle in constitutional law of the continuity",
    ),
    Document(
        "t3-4",
        "Heir apparent",
        "rank behind her brothers regardless of their ages or her age. Thus, normally, even an only",
    ),
    Document(
        "t3-5",
        "Heir apparent (thrones)",
        "to the 16 thrones of Elizabeth II to absolute primogeniture, except for male heirs born",
    ),
    Document(
        "t3-6", "Heir presumptive", "or the senior member of a collateral line (if the monarch is childless); the birth"
    ),
    Document("t4-1", "Pearl", "pearl: saltwater and freshwater pearls come in many different colors. While white, and"),
    Document("t4-2", "Pearl Fishery Coast", "Pearl Fishery Coast The Pearl Fishery Coast refers to a coastal area"),
    Document("t4-3", "Geography of India", "Great Nicobar Island); Rama's Bridge, and Point Calimere. The Arabian"),
    Document(
        "t4-4",
        "Bay of Bengal",
        "the gems of Sri Lanka. Garnet and other precious gems are also found in abundance in the",
    ),
]
TABLE3_TASK = {
    "id": "table3",
    "question": "who will take the throne after the queen dies?",
    "answers": ["Charles, Prince of Wales"],
}
#: NQ's gold for this question is not printed in the paper; "Gulf of Mannar" is our assumption for the fixture.
TABLE4_TASK = {"id": "table4", "question": "in which sea pearl is found in india?", "answers": ["Gulf of Mannar"]}


@pytest.fixture(scope="session")
def table_retriever(tmp_path_factory):
    """Lucene BM25 over :data:`TABLE_DOCS` (a real index in a temporary directory)."""
    from agentgym_turn.retrieval.lucene import corpus_index

    return corpus_index(TABLE_DOCS, "search-r1-tables", root=tmp_path_factory.mktemp("search_r1_idx"))


class ScriptedChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` server that answers with queued replies (then a default).

    A reply may be a string (sent as the message content) or an int (sent as that HTTP status code).
    """

    def __init__(self) -> None:
        self.queue: list[str | int] = []
        self.default: str | int = 500
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])).decode())
                with server._lock:
                    server.requests.append(body)
                    reply = server.queue.pop(0) if server.queue else server.default
                if isinstance(reply, int):
                    data, code = json.dumps({"error": "scripted failure"}).encode(), reply
                else:
                    payload = {"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}]}
                    data, code = json.dumps(payload).encode(), 200
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def spec(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1#scripted-judge"

    def script(self, *replies: str | int, default: str | int = 500) -> None:
        with self._lock:
            self.queue = list(replies)
            self.default = default
            self.requests = []

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def judge_server() -> Iterator[ScriptedChatServer]:
    server = ScriptedChatServer()
    yield server
    server.close()
