"""Difficulty of the offline question sets (run: ``python bench/bench_questions.py [--split validation]``).

For each offline set (``lead-v0``, ``facts-v1``) and each env's own search setting (WikiTwoTurn: top-1, MT-GRPO's
lowercase EM; SearchR1: top-3, SQuAD-normalised EM, questions validated against the retriever), the success rates
of three scripted policies (:func:`envs.wikiqa.scripted_rates`):

* ``title_em``: search the question verbatim, answer the first hit's title;
* ``search_answer``: the same search, correct iff a retrieved passage contains a gold answer (an oracle span);
* ``no_search_em`` / ``no_search_kind_em``: no search, answer the train split's most frequent answer (overall /
  for the question's kind).

Also the build time of each set (from scratch, no cache) and the share of two-hop questions.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="validation", choices=["train", "validation", "test"])
    args = parser.parse_args()

    from agentgym_turn.answers import normalize_basic, normalize_squad
    from agentgym_turn.retrieval.lucene import wiki_bm25
    from envs.search_r1.data import wiki_search_questions
    from envs.wiki_two_turn.questions import QUESTION_SETS, wiki_questions
    from envs.wikiqa import scripted_rates

    retriever = wiki_bm25()
    rows = []
    old_cache = os.environ.get("TURNRL_CACHE")
    with tempfile.TemporaryDirectory() as tmp:  # a fresh cache: build times include everything (validation too)
        os.environ["TURNRL_CACHE"] = tmp
        try:
            for name in QUESTION_SETS:
                start = time.perf_counter()
                wiki = {s: wiki_questions(s, question_set=name) for s in ("train", args.split)}
                secs = time.perf_counter() - start
                rates = scripted_rates(wiki[args.split], retriever, k=1, normalize=normalize_basic, prior=wiki["train"])
                rows.append(("WikiTwoTurn", name, 1, secs, wiki[args.split], rates))
                start = time.perf_counter()
                sr1 = {s: wiki_search_questions(retriever, s, k=3, question_set=name) for s in ("train", args.split)}
                secs = time.perf_counter() - start
                rates = scripted_rates(sr1[args.split], retriever, k=3, normalize=normalize_squad, prior=sr1["train"])
                rows.append(("SearchR1", name, 3, secs, sr1[args.split], rates))
        finally:
            if old_cache is None:
                os.environ.pop("TURNRL_CACHE", None)
            else:
                os.environ["TURNRL_CACHE"] = old_cache

    print(f"split={args.split}; Lucene BM25 over the bundled corpus; build = seconds to build train+{args.split}")
    print(f"{'env':<12} {'set':<9} {'k':>1} {'n':>5} {'2-hop':>6} {'build s':>7} {'title_em':>8} "
          f"{'search_answer':>13} {'no_search_em':>12} {'no_search_kind_em':>17}")  # fmt: skip
    for env, name, k, secs, tasks, r in rows:
        two = sum(t.get("hops", 1) == 2 for t in tasks) / max(len(tasks), 1)
        print(f"{env:<12} {name:<9} {k:>1} {int(r['n']):>5} {two:>6.3f} {secs:>7.1f} {r['title_em']:>8.3f} "
              f"{r['search_answer']:>13.3f} {r['no_search_em']:>12.3f} {r['no_search_kind_em']:>17.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
