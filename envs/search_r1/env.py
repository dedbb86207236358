"""``TurnRL/SearchR1-v2``: multi-turn search QA with turn-level rewards, the MT-PPO task (``001_…`` §5, §6.2, D).

Worked example (an offline two-hop question, answered like the paper's Table 3: search, search, answer)::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/SearchR1-v2")                            # λs = 0.1, N_max = 4, top-3 passages
    >>> task = {"question": "What nationality was the actress mentioned in the Wikipedia lead of Casablanca (film)?",
    ...         "answers": ["Swedish"]}
    >>> msgs, info = env.reset(seed=0, options={"task": task})          # [system prompt, "Question: ..."]
    >>> msgs, r, term, trunc, info = env.step("<think>Find the film.</think><search>Casablanca (film)</search>")
    >>> msgs[0]["content"][:44]                                           # Search-R1's passage layout
    '<information>Doc 1(Title: Casablanca (film))'
    >>> info["reward_components"]            # no gold in the passages' titles and texts; well formed; 1 search so far
    {'retrieval': 0.0, 'format': 0.1, 'search_count': -0.1}
    >>> msgs, r, term, trunc, info = env.step("<think>Bergman.</think><search>Ingrid Bergman</search>")
    >>> info["reward_components"]                  # "Swedish" is in the passages; 2 searches so far
    {'retrieval': 0.3, 'format': 0.1, 'search_count': -0.2}
    >>> msgs, r, term, trunc, info = env.step("<think>She was Swedish.</think><answer>Swedish</answer>")
    >>> r, term, info["episode_metrics"]["env/answer_correct"]
    (1.0, True, 1.0)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from agentgym_turn.chat import ChatModel, make_chat_model
from agentgym_turn.core import Message, TurnEnv, TurnResult
from agentgym_turn.error import InvalidArgument, TurnRLError
from agentgym_turn.retrieval import Passage, Retriever
from envs.search_r1 import rewards as R
from envs.search_r1.data import (
    FACTS_SET,
    FLASHRAG_DATASETS,
    SPLITS,
    coerce_task,
    load_qa_dataset,
    load_qa_file,
    multihop_search_questions,
    wiki_search_questions,
)
from envs.search_r1.judge import Judge, JudgeTurn, JudgeVerdict
from envs.search_r1.policies import SCRIPTED_POLICIES

REWARD_MODES = ("verifiable", "judge")
#: How ``retrieval`` matches the gold answers: ``"words"`` (v1: whole words in the passages' titles and texts) or
#: ``"substring"`` (v0: a case-insensitive substring of the whole ``<information>`` block).
RETRIEVAL_MATCHES = ("words", "substring")
ON_JUDGE_FAILURE = ("report", "raise")
DEFAULT_MAX_TURNS = 4
#: The ``hops`` of the offline bridge questions (:mod:`envs.search_r1.multihop`).
MULTIHOP_HOPS = (2, 3)
DEFAULT_TOP_K = 3
MAX_QUERY_CHARS = 1000
#: 001 D.1.3: "a maximum retrieved content length of 500 tokens".
MAX_INFORMATION_TOKENS = 500
NO_RESULTS = "No passages found."
#: What a turn pays when the judge cannot score it: the worst verifiable outcome (a broken format), and the bottom
#: of the judge's own [-1, 1] scale, so provoking a judge failure never pays better than any scored turn.
JUDGE_FAILURE_REWARD = R.OUTCOME_BAD_FORMAT
#: The tokenizer-free token count: every run of word characters and every other non-space character is a token.
_WORD_TOKEN = re.compile(r"\w+|[^\w\s]")

TokenSpans = Callable[[str], Sequence[tuple[int, int]]]

SYSTEM_PROMPT = """Answer the question you are given. Every time you receive new information, first reason about \
it inside <think> and </think>. If, after reasoning, you find you are missing some knowledge, call the search engine \
by writing <search> query </search>; the top search results will come back between <information> and \
</information>. You may search as many times as you like. When you need no further external knowledge, give the \
answer directly inside <answer> and </answer>, without explanations, for example <answer> Beijing </answer>. You \
have at most {max_turns} turns; one turn is either one search or the final answer."""

INVALID_ACTION = (
    "Error: your previous action is invalid. To search, put the query between <search> and </search>. "
    "To give the final answer, put the answer between <answer> and </answer>. Try again."
)


class JudgeFailure(TurnRLError, RuntimeError):
    """Every attempt of the LLM judge failed (raised only with ``on_judge_failure="raise"``)."""


def _label(i: int) -> str:
    return f"Doc {i}(Title: "


def render_information(passages: Sequence[Passage]) -> str:
    """Search-R1's ``<information>`` block: ``Doc i(Title: ...) text`` per passage, one per line."""
    body = "\n".join(f"{_label(i)}{p.title}) {p.text}" for i, p in enumerate(passages, 1)) or NO_RESULTS
    return f"<information>{body}</information>"


def word_token_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every token of ``text`` without a tokenizer: each run of word characters and each other
    non-space character is one token (SmolLM2's BPE tokenizer makes 1.18 of its tokens from each on the bundled
    corpus)."""
    return [m.span() for m in _WORD_TOKEN.finditer(text)]


def tokenizer_spans(name: str) -> TokenSpans:
    """``(start, end)`` of every token of a text under the tokenizer ``name`` (``"smollm2"``, an HF id or folder, as
    :func:`agentgym_turn.models.load_tokenizer` takes; a fast tokenizer, for its offsets)."""
    from agentgym_turn.models import load_tokenizer

    tokenizer = load_tokenizer(name)
    if not tokenizer.is_fast:
        raise InvalidArgument(f"information_tokenizer={name!r} is not a fast tokenizer; its offsets are needed.")

    def spans(text: str) -> list[tuple[int, int]]:
        return [
            tuple(o) for o in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        ]

    return spans


def cap_passages(
    passages: Sequence[Passage], max_tokens: int | None, token_spans: TokenSpans = word_token_spans
) -> list[Passage]:
    """The passages as the agent sees them when the ``<information>`` body is cut after ``max_tokens`` tokens
    (001 D.1.3 caps retrieved content at 500 tokens; ``None``: no cap).

    The tokens of the rendered body (``Doc i(Title: T) text`` lines, labels included) are counted; the passage in
    which the budget runs out keeps its text up to the last whole token, and a passage whose label or title would
    be cut is dropped, as are the ones after it. The ``<information>`` tags are not cut.
    """
    if max_tokens is None or not passages:
        return list(passages)
    lines = [f"{_label(i)}{p.title}) {p.text}" for i, p in enumerate(passages, 1)]
    spans = token_spans("\n".join(lines))
    if len(spans) <= max_tokens:
        return list(passages)
    cut = spans[max_tokens - 1][1]
    kept: list[Passage] = []
    start = 0
    for i, (p, line) in enumerate(zip(passages, lines, strict=True), 1):
        text_start = start + len(_label(i)) + len(p.title) + 2
        if cut <= text_start:
            break
        kept.append(p if cut >= start + len(line) else replace(p, text=p.text[: cut - text_start].rstrip()))
        start += len(line) + 1
    return kept


def make_retriever(spec: Retriever | str | None) -> Retriever:
    """A retriever from a spec: ``None``/``"wiki-bm25"`` (bundled Lucene BM25), ``"dense"`` (MiniLM + faiss over
    the bundled corpus; its first use embeds ~10,000 leads, which takes minutes, then the vectors are cached), an
    ``http(s)://.../retrieve`` URL (a Search-R1 retrieval server), or a Retriever."""
    if spec is None or spec == "wiki-bm25":
        from agentgym_turn.retrieval.lucene import wiki_bm25

        return wiki_bm25()
    if spec == "dense":
        from agentgym_turn.retrieval.dense import wiki_dense

        return wiki_dense()
    if isinstance(spec, str) and spec.startswith(("http://", "https://")):
        from agentgym_turn.retrieval.http import SearchR1Retriever

        return SearchR1Retriever(spec)
    if isinstance(spec, Retriever):
        return spec
    raise InvalidArgument(
        f"retriever={spec!r} is not known; use 'wiki-bm25', 'dense', a Search-R1 server URL such as "
        "'http://127.0.0.1:8000/retrieve', or a Retriever object."
    )


class SearchR1Env(TurnEnv):
    """Multi-turn search-augmented QA paying a reward every turn (Search-R1's task, MT-PPO's rewards).

    ## Description
    The agent answers a factual question, single-hop or multi-hop. Each turn it reasons inside ``<think>`` and then
    either searches with ``<search> query </search>`` (the env answers with the top-3 passages inside
    ``<information>``) or answers with ``<answer> ... </answer>``, which ends the episode. It has at most
    ``max_turns`` turns (4 by default; the paper ablates 4–6). Default search: Lucene BM25 over the bundled ~10,000
    Wikipedia lead sections (CC BY-SA 4.0); also a dense MiniLM index or any Search-R1 retrieval server.

    ## Observation
    Chat messages: ``reset`` gives ``[system(instructions), user("Question: ...")]``; a search turn gives
    ``[user("<information>Doc 1(Title: T) text\\nDoc 2(...) ...</information>")]``; a turn with neither a complete
    ``<search>`` nor ``<answer>`` block gives ``[user(INVALID_ACTION)]`` (Search-R1's corrective message, in the
    ``Error: ...`` form); the final turn gives ``[]``.

    ## Action
    The assistant's whole turn as one ``str``; any text is accepted. Its action is the first complete
    ``<search>...</search>`` or ``<answer>...</answer>`` block (Search-R1's rule).

    ## Rewards
    ``reward_mode="verifiable"`` (§5.2). Per search turn (level ``turn``):
        * ``retrieval``: 0.3 if any gold answer occurs in the title or text of a passage this turn retrieved (as
          the agent sees it, after the cap), as whole words after SQuAD normalisation with punctuation read as a
          word boundary (``rewards.contains_words``), else 0. The ``Doc i(Title: ...)`` labels and the
          ``No passages found.`` message are not passages: answering ``3`` or ``no`` matches neither;
        * ``format``: +0.1 if the turn's tags are only ``<think>``, ``<search>`` (then the env's ``<information>``),
          each once, ``<think>`` first; else -0.2;
        * ``search_count``: -λs × (searches from turn 1 up to this one), λs = ``search_lambda`` = 0.1.
    An invalid turn pays ``format`` -0.2 and ``search_count`` (its count does not grow), no ``retrieval``.
    Per final turn (level ``outcome``), ``outcome``: 1 (format right and exact match after SQuAD normalisation),
    0.2 (format right, answer wrong), -1 (format broken: the tags must be only ``<think>`` then ``<answer>``, once
    each). Spending the budget without an answer turn pays ``outcome`` -1 at the last turn (its search, if any, is
    not run). Example (Table 3): 0.0, -0.1, then 1.0.

    ``reward_mode="judge"`` (§5.3, D.2): the LLM judge scores the trajectory so far with the turn-level prompt at
    every turn; the current turn's score is paid as ``judge_turn`` (level ``turn``) for intermediate turns and
    ``judge_final`` (level ``outcome``) for the final turn. At the end the outcome-level prompt's 1.0/0.0 is
    reported as the metric ``env/judge_outcome`` (``judge_outcome=True``). A judge that fails or answers malformed
    text is retried ``judge_retries`` times; if it still fails, the turn's judge component pays
    :data:`JUDGE_FAILURE_REWARD` = -1 (``judge_failure_reward``), the worst verifiable outcome and the bottom of
    the judge's scale (a failure must never pay more than a scored turn, or a policy would learn to break the
    judge), ``info["judge_failed"]`` is True, ``info["judge"]`` holds the errors and the episode metric
    ``env/judge_failures`` counts them (with ``on_judge_failure="raise"``, :class:`JudgeFailure` is raised instead:
    use it when a flaky judge must not become a training signal). A failed outcome-level judge only leaves
    ``env/judge_outcome`` out. The verifiable components of every turn are always in
    ``info["verifiable_components"]``.

    ## Episode End
    Terminated by an answer turn or when ``max_turns`` turns are spent. Never truncated by the env. Final
    ``info["episode_metrics"]`` (D.1.2): ``env/answer_correct`` (exact match of the final ``<answer>``),
    ``env/format_correct`` (every turn well formed and the episode ended with an answer), ``env/retrieval_correct``
    (a gold answer occurred in some ``<information>``), ``env/searches``, ``env/invalid_turns``, ``env/answered``;
    judge mode adds ``env/judge_outcome`` (when scored) and ``env/judge_failures``.

    ## Arguments
    ``gym.make("TurnRL/SearchR1-v2", dataset="wiki", question_set="facts-v1", hops=None, split="train",
    retriever="wiki-bm25", max_turns=4, top_k=3, search_lambda=0.1, reward_mode="verifiable")``:
        * ``dataset``: ``"wiki"`` (offline single- and two-hop questions validated against the retriever), one of
          ``nq``, ``triviaqa``, ``popqa``, ``hotpotqa``, ``2wikimultihopqa``, ``musique`` (FlashRAG through HF
          ``datasets``), or a path to a FlashRAG ``.jsonl`` / Search-R1 ``.parquet`` file.
        * ``question_set`` (``dataset="wiki"``): ``"facts-v1"`` (default: templated questions about facts inside the
          leads, span answers, 25% two-hop) or ``"lead-v0"`` (v0's set, answered by the first hit's title); see
          :mod:`envs.search_r1.data` for both and their measured difficulty.
        * ``hops`` (``dataset="wiki"``): ``None`` (default: ``question_set``), or ``2`` / ``3`` for the offline bridge
          questions of :mod:`envs.search_r1.multihop` (*What is the population of the city mentioned in the
          Wikipedia article on Al-Jabr?*: search the article named in the question, read which entity it names,
          search that entity, answer; three hops chain two roles). A verbatim search of the question never retrieves
          an article past the first; ``max_turns`` defaults to ``hops + 2`` (the oracle's searches, the answer, and
          one spare turn). Sizes (BM25 top-3): 2 hops 310 train / 80 validation / 84 test, 3 hops 255 / 62 / 64.
        * ``disjoint_held_out`` (``dataset="wiki"``, default True): the validation and test splits hold no question
          (SQuAD-normalised) and no gold answer (aliases included) of the train split, and no question twice
          (:func:`~envs.search_r1.data.disjoint_splits`); ``False``: v1's splits.
        * ``split``: ``train``/``validation``/``test`` for ``wiki``; the FlashRAG split names otherwise.
        * ``tasks``: an explicit list of ``{"question", "answers", "id"?}`` instead of a dataset.
        * ``retriever``: ``"wiki-bm25"``, ``"dense"``, a Search-R1 server URL (``http://host:port/retrieve``) or a
          :class:`~agentgym_turn.retrieval.Retriever`.
        * ``max_turns`` (N_max; default 4, ``hops + 2`` with ``hops``), ``top_k`` (passages per search),
          ``search_lambda`` (λs).
        * ``reward_mode``: ``"verifiable"`` or ``"judge"``; ``judge``: a chat-model spec for
          :func:`agentgym_turn.chat.make_chat_model` (``"http://127.0.0.1:8000/v1#MODEL"``, ``"hf:..."``) or a
          ``ChatModel``; ``judge_retries``, ``judge_max_tokens`` (reply budget), ``judge_outcome``,
          ``on_judge_failure`` (``"report"``/``"raise"``).
        * ``max_query_chars``: a longer query is cut to this many characters before it is searched.
        * ``retrieval_match``: ``"words"`` (default, see Rewards) or ``"substring"`` (v0's match:
          :func:`~envs.search_r1.rewards.reward_retrieval_substring`).
        * ``judge_failure_reward``: what a failed judge's turn pays (default :data:`JUDGE_FAILURE_REWARD` = -1);
          ``None`` leaves the judge component out of that turn, as v0 did (the turn then pays 0).
        * ``max_information_tokens``: the retrieved passages are cut after this many tokens (001 D.1.3: 500;
          ``None``: no cap; :func:`cap_passages`); ``info["information_truncated"]`` says when a search was cut.
          ``information_tokenizer``: the tokenizer that counts them, the policy's for the paper's exact cap (an HF
          id or folder such as ``"Qwen/Qwen2.5-7B"``, or ``"smollm2"``); ``None`` (default) counts word runs and
          punctuation marks without a tokenizer (SmolLM2's BPE makes 1.18 tokens of each on the bundled corpus).

    ## Version History
    Each version's id makes it; the kwargs give the same env under the newest id:

    * ``TurnRL/SearchR1-v0`` = ``gym.make("TurnRL/SearchR1-v2", question_set="lead-v0",
      retrieval_match="substring", judge_failure_reward=None, max_information_tokens=None,
      disjoint_held_out=False)`` (it warns).
    * ``TurnRL/SearchR1-v1`` = ``gym.make("TurnRL/SearchR1-v2", disjoint_held_out=False)`` (it warns).
    * ``TurnRL/SearchR1-v2`` = ``gym.make("TurnRL/SearchR1-v2")``.

    * v0: the paper's task and rewards, with these choices where it is silent: the instructions are the system
      message and the question the user message ("Question: q"); retrieved passages are user messages; the env's
      ``<information>`` block is well formed by construction, so the intermediate format is checked on the agent's
      text (exactly ``<think></think><search></search>``; anything shaped like an XML tag counts as a tag; free text
      outside tags is allowed); the search penalty is paid on every intermediate turn, invalid ones included; an
      invalid turn pays no retrieval component; the last turn is always scored as the final turn, so a search at
      turn N_max is not run (Search-R1's final rollout, Table 4); an empty ``<search></search>`` is a search that
      finds nothing; the judge is asked at every turn on the trajectory so far (the D.2 prompt scores a finished
      trajectory, so its data gains an "EPISODE STATUS" line saying whether the last turn is final).
    * v1: issue 12's reward fixes. ``retrieval`` matches the gold answers against the retrieved passages' titles
      and texts only, as whole words after normalisation: v0 searched the whole ``<information>`` block
      case-insensitively as a substring, so answer ``3`` earned 0.3 from the "Doc 3(Title:" label with irrelevant
      passages, and answer ``no`` from the "No passages found." of an empty ``<search></search>``. A failed judge
      pays -1 (:data:`JUDGE_FAILURE_REWARD`) instead of leaving the component out, which paid 0, more than the -1
      of a broken format. Retrieved content is capped at 500 tokens (D.1.3); v0 did not cap it. The default offline
      questions are the ``facts-v1`` set (v0's: ``question_set="lead-v0"``): on v0's set, searching the question
      verbatim and copying the first hit's title scored EM 0.92 (validation, BM25 top-3), beside the paper's best
      trained 7B model at ~0.45. On ``facts-v1`` that policy scores 0.009, a verbatim search returns a passage
      containing the answer for 0.780 of the questions, and 25% of the questions are two-hop (v0: 2.5%).
    * Every id, no version bump: the episode metrics moved from ``info["episode"]`` to ``info["episode_metrics"]``
      (:data:`agentgym_turn.core.EPISODE_METRICS_KEY`), so Gymnasium's ``RecordEpisodeStatistics`` can add its
      own ``info["episode"]``; rewards, tasks and the metrics themselves are unchanged.
    * v2: issue 49's clean held-out sets. The offline validation and test splits drop every question whose
      normalised text or any gold answer occurs in train (facts-v1 test: 504 -> 224 questions, validation 649 ->
      316; all 280 + 333 dropped shared an answer with train, none a question; none repeated within a split); train
      is unchanged. New ``hops=2|3``: offline bridge questions needing 2-3 searches (:mod:`envs.search_r1.multihop`).
    """

    reward_levels: ClassVar[dict[str, str]] = {
        "retrieval": "turn",
        "format": "turn",
        "search_count": "turn",
        "outcome": "outcome",
        "judge_turn": "turn",
        "judge_final": "outcome",
    }
    shared_attributes: ClassVar[tuple[str, ...]] = ("_retriever", "_tasks", "_judge", "_token_spans")
    scripted_policies: ClassVar[dict[str, Any]] = dict(SCRIPTED_POLICIES)

    def __init__(
        self,
        *,
        dataset: str = "wiki",
        split: str = "train",
        tasks: Sequence[Mapping[str, Any]] | None = None,
        question_set: str = FACTS_SET,
        hops: int | None = None,
        disjoint_held_out: bool = True,
        retriever: Retriever | str | None = None,
        max_turns: int | None = None,
        top_k: int = DEFAULT_TOP_K,
        search_lambda: float = R.SEARCH_LAMBDA,
        reward_mode: str = "verifiable",
        judge: str | ChatModel | None = None,
        judge_retries: int = 2,
        judge_max_tokens: int = 1024,
        judge_outcome: bool = True,
        on_judge_failure: str = "report",
        max_query_chars: int = MAX_QUERY_CHARS,
        max_information_tokens: int | None = MAX_INFORMATION_TOKENS,
        information_tokenizer: str | None = None,
        retrieval_match: str = "words",
        judge_failure_reward: float | None = JUDGE_FAILURE_REWARD,
        max_action_chars: int = 32_768,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode, max_action_chars=max_action_chars)
        if hops is not None and (isinstance(hops, bool) or hops not in MULTIHOP_HOPS):
            raise InvalidArgument(
                f"hops={hops!r} must be None (the single-hop facts set) or one of {MULTIHOP_HOPS} (bridge questions)."
            )
        if hops is not None and (tasks is not None or dataset != "wiki"):
            raise InvalidArgument(f"hops={hops} poses the offline bridge questions: use dataset='wiki' and no tasks.")
        self.hops = hops
        self.disjoint_held_out = bool(disjoint_held_out)
        if max_turns is None:
            max_turns = DEFAULT_MAX_TURNS if hops is None else hops + 2
        if not isinstance(max_turns, int) or max_turns < 1:
            raise InvalidArgument(f"max_turns={max_turns!r} must be an int >= 1 (the paper uses 4).")
        if not isinstance(top_k, int) or top_k < 1:
            raise InvalidArgument(f"top_k={top_k!r} must be an int >= 1 (the paper uses 3).")
        if not isinstance(search_lambda, int | float) or search_lambda < 0:
            raise InvalidArgument(f"search_lambda={search_lambda!r} must be a number >= 0 (the paper uses 0.1).")
        if reward_mode not in REWARD_MODES:
            raise InvalidArgument(f"reward_mode={reward_mode!r}; use one of {REWARD_MODES}.")
        if on_judge_failure not in ON_JUDGE_FAILURE:
            raise InvalidArgument(f"on_judge_failure={on_judge_failure!r}; use one of {ON_JUDGE_FAILURE}.")
        if reward_mode == "judge" and judge is None:
            raise InvalidArgument(
                "reward_mode='judge' needs judge=...: a chat-model spec such as 'http://127.0.0.1:8000/v1#MODEL' "
                "or 'hf:HuggingFaceTB/SmolLM2-135M-Instruct', or a ChatModel."
            )
        if not isinstance(max_query_chars, int) or max_query_chars < 1:
            raise InvalidArgument(f"max_query_chars={max_query_chars!r} must be an int >= 1.")
        if max_information_tokens is not None and (
            not isinstance(max_information_tokens, int) or max_information_tokens < 1
        ):
            raise InvalidArgument(
                f"max_information_tokens={max_information_tokens!r} must be None or an int >= 1 (the paper uses 500)."
            )
        if retrieval_match not in RETRIEVAL_MATCHES:
            raise InvalidArgument(
                f"retrieval_match={retrieval_match!r} is not known; use 'words' (default: whole words in the passages) "
                "or 'substring' (v0's match over the whole <information> block)."
            )
        if judge_failure_reward is not None and (
            isinstance(judge_failure_reward, bool) or not isinstance(judge_failure_reward, int | float)
        ):
            raise InvalidArgument(
                f"judge_failure_reward={judge_failure_reward!r} must be a number (default {JUDGE_FAILURE_REWARD}) or "
                "None (v0: the failed turn's judge component is left out)."
            )
        self.retrieval_match = retrieval_match
        self.judge_failure_reward = judge_failure_reward
        self.max_information_tokens = max_information_tokens
        self._token_spans = (
            word_token_spans if information_tokenizer is None else tokenizer_spans(information_tokenizer)
        )
        self.max_turns = max_turns
        self.top_k = top_k
        self.search_lambda = float(search_lambda)
        self.reward_mode = reward_mode
        self.judge_outcome = judge_outcome
        self.on_judge_failure = on_judge_failure
        self.max_query_chars = max_query_chars
        self._retriever = make_retriever(retriever)
        self._judge = (
            Judge(make_chat_model(judge), retries=judge_retries, max_tokens=judge_max_tokens)
            if reward_mode == "judge"
            else None
        )
        if tasks is not None:
            self._tasks = tuple(self._validate_task(t) for t in tasks)
            if not self._tasks:
                raise InvalidArgument("tasks=[] is empty; pass at least one {'question', 'answers'} task.")
        else:
            self._tasks = tuple(self._load_dataset(dataset, split, question_set))
            if not self._tasks:
                raise InvalidArgument(f"dataset={dataset!r} split={split!r} holds no questions.")
        self.system_prompt = SYSTEM_PROMPT.format(max_turns=max_turns)
        self._reset_state()

    def _load_dataset(self, dataset: str, split: str, question_set: str) -> list[dict[str, Any]]:
        if dataset == "wiki":
            if split not in SPLITS:
                raise InvalidArgument(f"split={split!r} is not one of {SPLITS} for dataset='wiki'.")
            if self.hops is not None:
                return multihop_search_questions(self._retriever, split, hops=self.hops, k=self.top_k)
            return wiki_search_questions(
                self._retriever, split, k=self.top_k, question_set=question_set, disjoint=self.disjoint_held_out
            )
        if dataset in FLASHRAG_DATASETS:
            return load_qa_dataset(dataset, split)
        if dataset.endswith((".jsonl", ".json", ".parquet")):
            return load_qa_file(dataset)
        raise InvalidArgument(
            f"dataset={dataset!r} is not known; use 'wiki', one of {sorted(FLASHRAG_DATASETS)}, or a path to a "
            ".jsonl/.parquet file."
        )

    def _reset_state(self) -> None:
        self._judge_turns: list[JudgeTurn] = []
        self._searches = 0
        self._invalid = 0
        self._format_ok = True
        self._retrieved = False
        self._answer_text: str | None = None
        self._judge_failures = 0
        self._judge_outcome: float | None = None

    # ------------------------------------------------------------------ tasks
    @property
    def retriever(self) -> Retriever:
        """The search backend."""
        return self._retriever

    @property
    def tasks(self) -> tuple[dict[str, Any], ...]:
        """The env's task pool."""
        return self._tasks

    def task_list(self) -> tuple[dict[str, Any], ...]:
        """Every task of the split, in the dataset's order (:meth:`agentgym_turn.core.TurnEnv.task_list`)."""
        return self._tasks

    def _validate_task(self, task: Mapping[str, Any]) -> dict[str, Any]:
        return coerce_task(task)

    def _sample_task(self) -> dict[str, Any]:
        pick = int(self.np_random.integers(len(self._tasks)))
        return dict(self._tasks[pick])

    # ------------------------------------------------------------------ episode
    def _begin(self, task: dict[str, Any]) -> list[Message]:
        self._reset_state()
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": f"Question: {task['question']}"},
        ]

    def _state_key(self) -> str:
        """Anchor-state key: turn index + digest of the conversation so far (``TurnEnv.conversation_key``)."""
        return self.conversation_key()

    def _turn(self, text: str) -> TurnResult:
        answers = self.task["answers"]
        oversized = len(text) > self.max_action_chars
        kind, content = ("invalid", "") if oversized else R.classify_action(text)
        info: dict[str, Any] = {"action": kind}
        final = kind == "answer" or self.turn >= self.max_turns
        if final:
            scored = text if kind == "answer" and not oversized else None
            outcome = R.reward_outcome(scored, answers)
            self._answer_text = scored
            self._format_ok = self._format_ok and outcome != R.OUTCOME_BAD_FORMAT
            if kind != "answer":
                info["budget_spent"] = True
            verifiable = {"outcome": outcome}
            messages: list[Message] = []
        elif kind == "search":
            self._searches += 1
            query = content.strip()[: self.max_query_chars]
            found = self._retriever.search(query, k=self.top_k) if query else []
            passages = cap_passages(found, self.max_information_tokens, self._token_spans)
            info["information_truncated"] = passages != list(found)
            information = render_information(passages)
            verifiable = {
                "retrieval": R.reward_retrieval(passages, answers)
                if self.retrieval_match == "words"
                else R.reward_retrieval_substring(information, answers),
                "format": R.reward_intermediate_format(text),
                "search_count": R.reward_search_count(self._searches, self.search_lambda),
            }
            self._retrieved = self._retrieved or verifiable["retrieval"] > 0
            self._format_ok = self._format_ok and verifiable["format"] > 0
            info["query"] = query
            messages = [{"role": "user", "content": information}]
        else:
            self._invalid += 1
            self._format_ok = False
            verifiable = {
                "format": R.FORMAT_BAD,
                "search_count": R.reward_search_count(self._searches, self.search_lambda),
            }
            if oversized:
                info["error"] = f"the turn is {len(text)} characters long; at most {self.max_action_chars}."
            messages = [{"role": "user", "content": INVALID_ACTION}]
        info["verifiable_components"] = dict(verifiable)
        self._judge_turns.append(JudgeTurn(text, messages[0]["content"] if messages else ""))
        components = verifiable if self.reward_mode == "verifiable" else self._judge_components(final, info)
        return TurnResult(messages, components, final, info)

    def _judge_components(self, final: bool, info: dict[str, Any]) -> dict[str, float]:
        assert self._judge is not None
        question, answers = self.task["question"], self.task["answers"]
        verdict = self._judge.score_turns(question, self._judge_turns, answers, finished=final)
        info["judge"] = verdict
        score = float(verdict.score) if verdict.ok else self.judge_failure_reward  # type: ignore[arg-type]
        components = {} if score is None else {"judge_final" if final else "judge_turn": float(score)}
        if not verdict.ok:
            self._on_failure(verdict, "turn-level")
        info["judge_failed"] = not verdict.ok
        if final and self.judge_outcome:
            outcome = self._judge.score_outcome(question, self._judge_turns, answers)
            info["judge_outcome"] = outcome
            if outcome.ok:
                self._judge_outcome = outcome.score
            else:
                self._on_failure(outcome, "outcome-level")
                info["judge_failed"] = True
        return components

    def _on_failure(self, verdict: JudgeVerdict, which: str) -> None:
        self._judge_failures += 1
        if self.on_judge_failure == "raise":
            raise JudgeFailure(
                f"the {which} judge failed after {verdict.attempts} attempt(s): {verdict.errors}. Check the judge "
                "model, or pass on_judge_failure='report' to record failures in info instead."
            )

    def _episode_metrics(self) -> dict[str, float]:
        metrics = {
            "env/answer_correct": float(
                self._answer_text is not None and R.answer_correct(self._answer_text, self.task["answers"])
            ),
            "env/format_correct": float(self._format_ok and self._answer_text is not None),
            "env/retrieval_correct": float(self._retrieved),
            "env/searches": float(self._searches),
            "env/invalid_turns": float(self._invalid),
            "env/answered": float(self._answer_text is not None and R.final_answer(self._answer_text) is not None),
        }
        if self.reward_mode == "judge":
            metrics["env/judge_failures"] = float(self._judge_failures)
            if self._judge_outcome is not None:
                metrics["env/judge_outcome"] = float(self._judge_outcome)
        return metrics
