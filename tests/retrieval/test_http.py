"""Search-R1's retrieval-server protocol: the client against a real local server serving a real Lucene index, the
wire format, error handling, and SearchR1-v2 running over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from agentgym_turn.error import InvalidArgument, ServiceError
from agentgym_turn.retrieval import Passage, Retriever
from agentgym_turn.retrieval.http import RetrievalServer, SearchR1Retriever, parse_retrieve_response, split_contents
from tests.retrieval.test_lucene import DOCS


@pytest.fixture(scope="module")
def lucene(tmp_path_factory):
    from agentgym_turn.retrieval.lucene import corpus_index

    return corpus_index(DOCS, "http-fixture", root=tmp_path_factory.mktemp("idx"))


@pytest.fixture(scope="module")
def server(lucene):
    with RetrievalServer(lucene) as s:
        yield s


def post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_client_matches_the_local_backend(server, lucene):
    client = SearchR1Retriever(server.url)
    assert isinstance(client, Retriever) and client.name.endswith("/retrieve")
    for q in ["Bizet opera", "river through Paris", "relativity"]:
        assert client.search(q, k=2) == lucene.search(q, k=2)
    queries = ["capital of France", "", "Einstein"]
    assert client.batch_search(queries, k=3) == lucene.batch_search(queries, k=3)
    assert client.batch_search([], k=3) == []


def test_wire_format(server):
    code, payload = post(
        server.url, json.dumps({"queries": ["Bizet opera"], "topk": 1, "return_scores": True}).encode()
    )
    assert code == 200
    (hit,) = payload["result"][0]
    assert hit["document"] == {"id": "d1", "contents": "Carmen\n" + DOCS[0].text} and isinstance(hit["score"], float)
    code, payload = post(server.url, json.dumps({"queries": ["Bizet opera"], "topk": 1}).encode())
    assert payload["result"][0] == [{"id": "d1", "contents": "Carmen\n" + DOCS[0].text}]  # no scores: bare documents


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"topk": 3}', b'{"queries": "one string", "topk": 3}', b'{"queries": ["q"], "topk": -2}'],
)
def test_bad_requests_get_400(server, body):
    code, payload = post(server.url, body)
    assert code == 400 and "bad request" in payload["detail"]


def test_health_and_unknown_routes(server):
    with urllib.request.urlopen(server.url.replace("/retrieve", "/health"), timeout=10) as resp:
        assert json.loads(resp.read())["status"] == "ok"
    code, _ = post(server.url.replace("/retrieve", "/search"), b"{}")
    assert code == 404


def test_parse_search_r1_responses():
    payload = {"result": [[{"document": {"id": "7", "contents": '"Heir apparent"\nrank behind'}, "score": 0.8}]]}
    assert parse_retrieve_response(payload, 1) == [[Passage("7", "Heir apparent", "rank behind", 0.8)]]
    bare = {"result": [[{"id": "1", "contents": "T\nx"}, {"id": "2", "contents": "U\ny"}]]}
    assert [p.score for p in parse_retrieve_response(bare, 1)[0]] == [0.0, -1.0]  # rank order kept
    assert split_contents('"A "quoted" title"\nbody\nmore') == ('A "quoted" title', "body\nmore")
    for bad, n in [({}, 1), ({"result": []}, 1), ({"result": [[{"document": {"id": 1}}]]}, 1), ({"result": [1]}, 1)]:
        with pytest.raises(ValueError):
            parse_retrieve_response(bad, n)


def test_client_errors():
    with pytest.raises(InvalidArgument):
        SearchR1Retriever("localhost:8000")
    dead = SearchR1Retriever("http://127.0.0.1:9/retrieve", retries=1, backoff=0.01, timeout=2)
    with pytest.raises(ServiceError, match="2 attempt"):
        dead.search("x")
    with pytest.raises(InvalidArgument):
        dead.search("x", k=0)


def test_server_errors_reach_the_client():
    class Broken:
        name = "broken"

        def search(self, query, k=3):
            raise RuntimeError("index is gone")

        def batch_search(self, queries, k=3):
            raise RuntimeError("index is gone")

    with RetrievalServer(Broken()) as s, pytest.raises(ServiceError, match="index is gone"):
        SearchR1Retriever(s.url, retries=0).search("x")


def test_search_r1_env_over_http(server):
    from envs.search_r1.env import SearchR1Env

    task = {"question": "Which opera did Bizet write?", "answers": ["Carmen"]}
    env = SearchR1Env(tasks=[task], retriever=server.url)
    env.reset(seed=0)
    msgs, reward, *_, info = env.step("<think> search </think><search> Bizet opera </search>")
    assert msgs[0]["content"].startswith("<information>Doc 1(Title: Carmen) Carmen is an opera")
    assert info["reward_components"] == {"retrieval": 0.3, "format": 0.1, "search_count": -0.1}


def test_cli_serves_the_bundled_index(wiki_retriever):
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym_turn.retrieval.http", "--backend", "wiki-bm25", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving lucene-bm25:"), line
        url = line.rsplit(" at ", 1)[1].strip()
        hits = SearchR1Retriever(url).search("theory of relativity physicist", k=3)
        assert [p.docid for p in hits] == [
            p.docid for p in wiki_retriever.search("theory of relativity physicist", k=3)
        ]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
