"""The Search-R1 retrieval-server protocol: a client (:class:`SearchR1Retriever`) and a small server.

Search-R1 and the projects built on it (its e5 / BM25 servers over wiki-18) answer ``POST /retrieve`` with::

    request   {"queries": ["q1", "q2"], "topk": 3, "return_scores": true}
    response  {"result": [[{"document": {"id": "123", "contents": "\\"Title\\"\\ntext"}, "score": 0.83}, ...], ...]}

one list per query, best first; with ``"return_scores": false`` each item is the document itself
(``{"id", "contents"}``). ``contents`` is the title line, a newline, then the passage (wiki-18 quotes titles).

The client implements :class:`~agentgym_turn.retrieval.Retriever`, so such a server plugs into any env::

    >>> r = SearchR1Retriever("http://127.0.0.1:8000/retrieve")
    >>> r.search("who wrote hamlet", k=3)[0].title

The server (:class:`RetrievalServer`, or ``python -m agentgym_turn.retrieval.http --backend wiki-bm25 --port 8000``)
serves any local Retriever over the same protocol, e.g. the bundled Lucene BM25 index, so several processes
(vector-env workers, a trainer on another host) can share one index.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentgym_turn.error import InvalidArgument, ServiceError
from agentgym_turn.httpjson import post_json, send_json
from agentgym_turn.retrieval import Passage, Retriever


def split_contents(contents: str) -> tuple[str, str]:
    """``(title, text)`` from a Search-R1 ``contents`` string (first line, quotes stripped; the rest)."""
    title, _, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


def parse_retrieve_response(payload: Any, n_queries: int) -> list[list[Passage]]:
    """Passages from a ``/retrieve`` response; raises ``ValueError`` saying what is malformed."""
    if not isinstance(payload, dict) or not isinstance(payload.get("result"), list):
        raise ValueError(f'the response must be {{"result": [[...], ...]}}, got {json.dumps(payload)[:200]}')
    result = payload["result"]
    if len(result) != n_queries:
        raise ValueError(f"the response holds {len(result)} result lists for {n_queries} queries")
    out = []
    for hits in result:
        if not isinstance(hits, list):
            raise ValueError(f"a result list must be a list, got {type(hits).__name__}")
        passages = []
        for rank, hit in enumerate(hits):
            doc = hit.get("document", hit) if isinstance(hit, dict) else None
            if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
                raise ValueError(f"hit {rank} has no document 'contents': {json.dumps(hit)[:200]}")
            title, text = split_contents(doc["contents"])
            score = hit.get("score") if "document" in hit else None
            passages.append(
                Passage(
                    docid=str(doc.get("id", rank)),
                    title=title,
                    text=text,
                    score=float(score) if score is not None else float(-rank),
                )
            )
        out.append(passages)
    return out


@dataclass
class SearchR1Retriever:
    """A :class:`Retriever` backed by a Search-R1 retrieval server.

    Attributes:
        url: the endpoint, e.g. ``http://127.0.0.1:8000/retrieve`` (``/retrieve`` is appended when missing).
        timeout: seconds for one request.
        retries: further attempts after a failed one (connection errors, timeouts, 5xx).
        backoff: seconds before the first retry; doubles each time.
    """

    url: str
    timeout: float = 30.0
    retries: int = 2
    backoff: float = 0.5
    name: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise InvalidArgument(f"url={self.url!r} must start with http:// or https://.")
        if self.retries < 0 or self.timeout <= 0:
            raise InvalidArgument(f"retries={self.retries} must be >= 0 and timeout={self.timeout} > 0.")
        self.url = self.url.rstrip("/")
        if not self.url.endswith("/retrieve"):
            self.url += "/retrieve"
        self.name = f"search-r1-http:{self.url}"

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """The ``k`` best passages for ``query``."""
        return self.batch_search([query], k=k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """One ``POST /retrieve`` for all ``queries``; raises :class:`ServiceError` after the retries."""
        if k < 1:
            raise InvalidArgument(f"k={k} must be >= 1.")
        queries = list(queries)
        if not queries:
            return []
        request = {"queries": queries, "topk": int(k), "return_scores": True}
        payload = post_json(
            self.url,
            request,
            timeout=self.timeout,
            retries=self.retries,
            backoff=self.backoff,
            hint="Check that the server is up and speaks Search-R1's POST /retrieve protocol.",
        )
        try:
            return parse_retrieve_response(payload, len(queries))
        except ValueError as exc:
            raise ServiceError(
                f"retrieval server {self.url} answered malformed JSON: {exc}. Check that it speaks Search-R1's "
                "POST /retrieve protocol."
            ) from exc


def passage_to_hit(p: Passage, *, with_score: bool) -> dict[str, Any]:
    """A passage in the protocol's form (``{"document": {...}, "score": s}`` or the bare document)."""
    doc = {"id": p.docid, "contents": f"{p.title}\n{p.text}" if p.title else p.text}
    return {"document": doc, "score": p.score} if with_score else doc


class RetrievalServer:
    """Serves a local :class:`Retriever` over ``POST /retrieve`` (and ``GET /health``) in a background thread.

    Args:
        retriever: the backend to serve.
        host, port: where to listen (``port=0`` picks a free port; read it back from :attr:`url`).
        default_topk: used when a request gives no ``topk``.
    """

    def __init__(self, retriever: Retriever, *, host: str = "127.0.0.1", port: int = 0, default_topk: int = 3):
        self.retriever = retriever
        self.default_topk = default_topk
        handler = self._handler()
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The ``/retrieve`` endpoint."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/retrieve"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, payload: Any) -> None:
                send_json(self, payload, code)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/health":
                    self._send(200, {"status": "ok", "retriever": server.retriever.name})
                else:
                    self._send(404, {"detail": f"no route GET {self.path}; use POST /retrieve"})

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/retrieve":
                    self._send(404, {"detail": f"no route POST {self.path}; use POST /retrieve"})
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    request = json.loads(self.rfile.read(length).decode("utf-8"))
                    queries = request["queries"]
                    topk = request.get("topk") or server.default_topk
                    with_scores = bool(request.get("return_scores", False))
                    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
                        raise TypeError("'queries' must be a list of strings")
                    if not isinstance(topk, int) or topk < 1:
                        raise TypeError("'topk' must be a positive integer")
                except (ValueError, KeyError, TypeError) as exc:
                    self._send(400, {"detail": f"bad request: {exc}"})
                    return
                try:
                    results = server.retriever.batch_search(queries, k=topk)
                except Exception as exc:  # reported to the client as a server error, not swallowed
                    self._send(500, {"detail": f"{type(exc).__name__}: {exc}"})
                    return
                self._send(200, {"result": [[passage_to_hit(p, with_score=with_scores) for p in r] for r in results]})

        return Handler

    def start(self) -> RetrievalServer:
        """Serve in a daemon thread; returns ``self``."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted."""
        self._httpd.serve_forever()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> RetrievalServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: serve a bundled backend over Search-R1's protocol."""
    parser = argparse.ArgumentParser(description="Serve a TurnRL retriever over Search-R1's POST /retrieve.")
    parser.add_argument("--backend", choices=("wiki-bm25", "dense"), default="wiki-bm25")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--topk", type=int, default=3)
    args = parser.parse_args(argv)
    if args.backend == "wiki-bm25":
        from agentgym_turn.retrieval.lucene import wiki_bm25

        retriever: Retriever = wiki_bm25()
    else:
        from agentgym_turn.retrieval.dense import wiki_dense

        retriever = wiki_dense()
    server = RetrievalServer(retriever, host=args.host, port=args.port, default_topk=args.topk)
    print(f"serving {retriever.name} at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


if __name__ == "__main__":
    main()
