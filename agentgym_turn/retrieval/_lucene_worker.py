"""The process that hosts the JVM for :mod:`agentgym_turn.retrieval.lucene` (run as ``python -m`` by it).

It reads length-prefixed pickled requests ``(op, args)`` on stdin and answers ``("ok", result)`` or
``("err", traceback)`` on a private copy of stdout (fd 1 itself is pointed at stderr, so nothing the JVM prints can
corrupt the protocol). It exits when its stdin closes, i.e. when the Python process that started it ends.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import sys
import traceback
from typing import Any, BinaryIO

_HEADER = struct.Struct("<Q")


def read_frame(stream: BinaryIO) -> bytes | None:
    """One length-prefixed frame, or ``None`` at end of stream."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (n,) = _HEADER.unpack(head)
    body = stream.read(n)
    if len(body) < n:
        return None
    return body


def write_frame(stream: BinaryIO, payload: bytes) -> None:
    """Write one length-prefixed frame and flush."""
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _start_jvm(classpath: str, java_home: str, options: list[str]) -> Any:
    import jnius_config

    os.environ["JAVA_HOME"] = java_home
    jnius_config.set_classpath(classpath)
    jnius_config.add_options(*options)
    from jnius import autoclass

    # java.util.logging at TURNRL_JAVA_LOG_LEVEL (agentgym_turn.logs; unset: Java's default, INFO), e.g. Lucene's
    # warning at every index open that it runs on a Java newer than it was built for
    level = os.environ.get("TURNRL_JAVA_LOG_LEVEL")
    if level:
        autoclass("java.util.logging.Logger").getLogger("").setLevel(autoclass("java.util.logging.Level").parse(level))

    return autoclass


def _hits(hits: Any, with_raw: bool) -> list[tuple[str, float, str | None]]:
    return [(str(h.docid), float(h.score), h.lucene_document.get("raw") if with_raw else None) for h in hits]


def main() -> None:
    """Serve requests until stdin closes."""
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    autoclass: Any = None
    searchers: dict[str, Any] = {}
    while True:
        frame = read_frame(inp)
        if frame is None:
            return
        op, args = pickle.loads(frame)
        try:
            if op == "start":
                autoclass = _start_jvm(*args)
                result: Any = True
            elif op == "build":
                index_dir, docs, threads = args
                indexer = autoclass("io.anserini.index.SimpleIndexer")(
                    ["-index", index_dir, "-storeRaw", "-input", "", "-collection", "JsonCollection", "-threads",
                     str(threads)]
                )  # fmt: skip
                for start in range(0, len(docs), 5000):
                    indexer.addRawDocuments(
                        [json.dumps({"id": d, "contents": c}) for d, c in docs[start : start + 5000]]
                    )
                indexer.close()
                result = len(docs)
            elif op == "open":
                index_dir, k1, b = args
                searcher = autoclass("io.anserini.search.SimpleSearcher")(index_dir)
                searcher.set_bm25(float(k1), float(b))
                searchers[index_dir] = searcher
                result = int(searcher.get_total_num_docs())
            elif op == "search":
                index_dir, query, k, with_raw = args
                result = _hits(searchers[index_dir].search(query, int(k)), with_raw)
            elif op == "batch_search":
                index_dir, queries, k, threads, with_raw = args
                array_list = autoclass("java.util.ArrayList")
                jq, jid = array_list(), array_list()
                for i, q in enumerate(queries):
                    jq.add(q)
                    jid.add(str(i))
                found = searchers[index_dir].batch_search(jq, jid, int(k), int(threads))
                result = [_hits(found.get(str(i)), with_raw) for i in range(len(queries))]
            else:
                raise ValueError(f"unknown op {op!r}")
            reply = ("ok", result)
        except Exception:
            reply = ("err", traceback.format_exc())
        write_frame(out, pickle.dumps(reply))


if __name__ == "__main__":
    main()
