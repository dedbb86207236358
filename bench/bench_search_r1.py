"""Benchmark of TurnRL/SearchR1-v2 (run: ``python bench/bench_search_r1.py [--dense-docs 300] [--llm-judge]``).

Measures, side by side in one run on this machine:
  * episodes/s (and env steps/s) of the ``oracle`` scripted policy on offline questions (single- and two-hop) for
    each retrieval backend: Lucene BM25 in process, the same index behind a local Search-R1 HTTP server, and dense
    MiniLM + faiss over a corpus subset (``--dense-docs``; embedding the full corpus takes minutes and is cached);
  * the judge's overhead per episode: ``reward_mode="judge"`` against a local OpenAI-compatible server that replies
    at once with well-formed scores (protocol + prompt + parse cost), and, with ``--llm-judge``, against the bundled
    SmolLM2-135M as a real local judge (``judge_max_tokens`` caps its reply; the tiny model's parse failures are
    reported, not hidden).
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def play(env: Any, tasks: list[dict], policy: Any) -> tuple[float, int, list[dict]]:
    """Run one oracle episode per task; returns (seconds, steps, final metrics)."""
    from agentgym_turn.policies import run_episode

    steps, metrics = 0, []
    start = time.perf_counter()
    for i, task in enumerate(tasks):
        log = run_episode(env, policy, seed=i, options={"task": task})
        steps += len(log.actions)
        metrics.append(log.metrics)
    return time.perf_counter() - start, steps, metrics


class InstantJudge:
    """A local OpenAI-compatible server whose replies score every turn 0.1 and the outcome 1.0 (no model)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][-1]["content"]
                m = re.search(r"TURNS TO EVALUATE: (\d+)", prompt)
                if m:
                    lines = "\n".join(f"Turn{i}: 0.1" for i in range(1, int(m.group(1)) + 1))
                    content = f"<reasoning>ok</reasoning><score>\n{lines}\n</score>"
                else:
                    content = "<reasoning>ok</reasoning><score>1.0</score>"
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        host, port = self.httpd.server_address[:2]
        self.spec = f"http://{host}:{port}/v1#instant-judge"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def summarize(name: str, seconds: float, steps: int, metrics: list[dict]) -> dict[str, Any]:
    n = len(metrics)
    return {
        "backend": name,
        "episodes": n,
        "episodes_per_s": round(n / seconds, 1),
        "steps_per_s": round(steps / seconds, 1),
        "ms_per_episode": round(1000 * seconds / n, 2),
        "answer_correct": round(float(np.mean([m["env/answer_correct"] for m in metrics])), 3),
        "retrieval_correct": round(float(np.mean([m["env/retrieval_correct"] for m in metrics])), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400, help="oracle episodes per backend")
    parser.add_argument("--dense-docs", type=int, default=300, help="corpus subset embedded for the dense backend")
    parser.add_argument("--dense-episodes", type=int, default=60, help="dense episodes in all (slow: ~0.3 s each)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over the backends")
    parser.add_argument("--llm-judge", action="store_true", help="also time SmolLM2-135M as a real local judge")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(2)
    from agentgym_turn.corpus import load_wiki_summaries
    from agentgym_turn.policies import get_scripted_policy
    from agentgym_turn.retrieval.dense import DenseRetriever
    from agentgym_turn.retrieval.http import RetrievalServer
    from agentgym_turn.retrieval.lucene import wiki_bm25
    from envs.search_r1.data import wiki_search_questions
    from envs.search_r1.env import SearchR1Env

    rng = np.random.default_rng(0)
    lucene = wiki_bm25()
    t0 = time.perf_counter()
    pool = wiki_search_questions(lucene, "validation") + wiki_search_questions(lucene, "test")
    print(f"offline questions (validation+test): {len(pool)} ({time.perf_counter() - t0:.2f} s to load)")
    two_hop = [q for q in pool if q["hops"] == 2]
    single = [q for q in pool if q["hops"] == 1]
    picks = [single[i] for i in rng.choice(len(single), size=args.episodes - len(two_hop), replace=False)]
    tasks = two_hop + picks
    print(f"bench tasks: {len(tasks)} ({len(two_hop)} two-hop)")
    lucene_env = SearchR1Env(tasks=tasks, retriever=lucene)
    oracle = get_scripted_policy(lucene_env, "oracle")

    docs = load_wiki_summaries()
    by_id = {d.docid: d for d in docs}
    wanted = {d for q in tasks[: args.dense_docs // 3] for d in q["docs"]}
    extra = [d for d in rng.permutation(len(docs))[: args.dense_docs] if docs[d].docid not in wanted]
    subset = [by_id[d] for d in sorted(wanted)] + [docs[i] for i in extra][: max(0, args.dense_docs - len(wanted))]
    t0 = time.perf_counter()
    dense = DenseRetriever(subset)
    build = time.perf_counter() - t0
    dense_tasks = wiki_search_questions(dense, "train", docs=subset) + wiki_search_questions(
        dense, "validation", docs=subset
    )
    print(f"dense index: {len(subset)} docs in {build:.1f} s (cached after the first run); {len(dense_tasks)} tasks")

    server = RetrievalServer(lucene).start()
    judge = InstantJudge()
    # (name, env, tasks, episodes per round): every backend runs a slice in every round, so the machine's
    # changing load hits them alike; rates are totals over all rounds.
    backends = [
        ("lucene (in process)", lucene_env, tasks, len(tasks) // args.rounds),
        ("lucene via Search-R1 HTTP", SearchR1Env(tasks=tasks, retriever=server.url), tasks, len(tasks) // args.rounds),
        (
            f"dense MiniLM+faiss ({len(subset)} docs)",
            SearchR1Env(tasks=dense_tasks, retriever=dense),
            dense_tasks,
            max(1, args.dense_episodes // args.rounds),
        ),
        (
            "lucene, judge mode (instant HTTP judge)",
            SearchR1Env(tasks=tasks, retriever=lucene, reward_mode="judge", judge=judge.spec),
            tasks,
            len(tasks) // args.rounds,
        ),
    ]
    totals = {name: [0.0, 0, []] for name, *_ in backends}
    try:
        for _, env, pool_, _ in backends:
            play(env, pool_[:3], oracle)  # warm-up
        for r in range(args.rounds):
            for name, env, pool_, per_round in backends:
                chunk = [pool_[(r * per_round + i) % len(pool_)] for i in range(per_round)]
                seconds, steps, metrics = play(env, chunk, oracle)
                totals[name][0] += seconds
                totals[name][1] += steps
                totals[name][2].extend(metrics)
    finally:
        server.close()
        judge.close()
    rows = [summarize(name, *totals[name]) for name, *_ in backends]
    judge_name, base_name = backends[3][0], backends[0][0]
    extra_ms = rows[3]["ms_per_episode"] - rows[0]["ms_per_episode"]
    calls = (totals[judge_name][1] + len(totals[judge_name][2])) / len(totals[judge_name][2])
    failures = sum(m["env/judge_failures"] for m in totals[judge_name][2])
    print(
        f"judge overhead vs {base_name}: {extra_ms:.2f} ms per episode ({calls:.2f} judge calls per episode, "
        f"{extra_ms / calls:.2f} ms per call); judge failures: {failures:.0f}"
    )

    if args.llm_judge:
        from agentgym_turn.chat import TransformersChat

        model = TransformersChat("smollm2")
        t0 = time.perf_counter()
        model.complete([{"role": "user", "content": "Hi"}], max_tokens=1)
        print(f"SmolLM2-135M judge loaded (and one token generated) in {time.perf_counter() - t0:.1f} s")
        llm_tasks = tasks[:2]
        env_llm = SearchR1Env(
            tasks=llm_tasks, retriever=lucene, reward_mode="judge", judge=model, judge_retries=0, judge_max_tokens=64
        )
        s_l, n_l, m_l = play(env_llm, llm_tasks, oracle)
        fails = sum(m["env/judge_failures"] for m in m_l)
        print(
            f"SmolLM2-135M judge (64-token replies, no retries): {s_l / len(llm_tasks):.1f} s per episode, "
            f"{s_l / (n_l + len(llm_tasks)):.1f} s per call; {fails:.0f} failed calls of {n_l + len(llm_tasks)}"
        )

    width = max(len(r["backend"]) for r in rows)
    print(f"\n{'backend':<{width}}  episodes  ep/s     steps/s  ms/ep    answer  retrieval")
    for r in rows:
        print(
            f"{r['backend']:<{width}}  {r['episodes']:>8}  {r['episodes_per_s']:>7}  {r['steps_per_s']:>7}  "
            f"{r['ms_per_episode']:>7}  {r['answer_correct']:>6}  {r['retrieval_correct']:>9}"
        )
    base = rows[0]["episodes_per_s"]
    print(
        "\nratios to lucene in process: "
        + ", ".join(f"{r['backend']}: {r['episodes_per_s'] / base:.2f}x" for r in rows[1:])
    )


if __name__ == "__main__":
    main()
