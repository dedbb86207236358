"""``TurnRL/WikiTwoTurn-v2``: the two-turn Wikipedia-search QA task of MT-GRPO (``000_…`` §3.1–3.2, App. A–B).

Worked example (the reference scripted policy on one offline question)::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/WikiTwoTurn-v2")
    >>> task = {"question": "What is an opera in four acts by the French composer Georges Bizet?",
    ...         "answers": ["Carmen"]}
    >>> msgs, info = env.reset(seed=0, options={"task": task})          # [system prompt, question]
    >>> msgs, r, term, trunc, info = env.step(
    ...     '<reasoning>Search for it.</reasoning>\\n<tool>{"name": "wiki_search", "args": '
    ...     '{"query": "opera in four acts Georges Bizet"}}</tool>')
    >>> msgs[0]["content"][:22], r, info["reward_components"]
    ('<result>\\nCarmen\\nCarmen', 0.7, {'tool_execution': 0.2, 'search_answer': 0.5})
    >>> msgs, r, term, trunc, info = env.step("<reasoning>The result names it.</reasoning>\\n<answer>Carmen</answer>")
    >>> round(r, 3), term, info["reward_components"]["exact_match"]
    (1.9, True, 1.0)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from agentgym_turn.core import Message, TurnEnv, TurnResult
from agentgym_turn.error import InvalidArgument, InvalidTask
from agentgym_turn.parsing import JSON_MODES, ParseError, extract_tag, parse_tool_call
from agentgym_turn.queries import sample_query
from agentgym_turn.retrieval import Retriever
from agentgym_turn.tools import Tool, ToolError, ToolFailure, call_tool
from envs.wiki_two_turn import rewards as R
from envs.wiki_two_turn.questions import CLEAN_SET, SPLITS, load_triviaqa, wiki_questions
from envs.wikiqa import occurs, sentences

TOOL_NAME = "wiki_search"
NO_TOOL_ERROR = "Error: Tool command not found or invalid XML format. Please ensure correct formatting."
NO_RESULTS = "No relevant Wikipedia content found."

SYSTEM_PROMPT = """You can use the tools below to help answer questions.

{tool_descriptions}

Work through these steps once, in order:
1. Reason about the question inside <reasoning> tags.
2. Call a tool by writing a JSON object inside <tool> tags, with "name" (the tool to use) and "args" (its arguments).
3. The tool's output will come back to you inside <result> tags.
4. Reason about that output inside <reasoning> tags.
5. Give your final answer inside <answer> tags, based on your reasoning.

Rules:
- Call the tool exactly once. Do not call it a second time, even if the first search did not help.
- Combine what you already know with what the single tool call returns; if the result is not useful, answer from \
what you know.
- Tool calls must be valid JSON: follow the format exactly.
- Only use the tools and arguments listed above; never make up new ones.
- Reason about the tool's output before you give your answer.
- Your answer should match the expected ground-truth answer."""


def describe_tool(tool: Tool) -> str:
    """A tool's entry in the system prompt: ``name: description`` and its arguments (the paper's layout)."""
    lines = [f"{tool.name}: {tool.description}", "", "Arguments:"]
    for name, schema in tool.parameters.get("properties", {}).items():
        lines.append(f"  - {name}: {schema.get('description', '')}".rstrip(": "))
    example = {"name": tool.name, "args": {n: "..." for n in tool.argument_names()}}
    lines += ["", "Example:", f"  <tool>{json.dumps(example)}</tool>"]
    return "\n".join(lines)


def make_wiki_search_tool(retriever: Retriever, *, top_k: int = 1, max_result_chars: int | None = None) -> Tool:
    """The ``wiki_search`` tool: the top-``top_k`` articles for a query, each as ``title\\ntext``."""

    def wiki_search(query: str) -> str:
        if not query.strip():
            raise ToolError("the query is empty; write what to search for.")
        try:
            passages = retriever.search(query, k=top_k)
        except ValueError as exc:  # e.g. an over-long query
            raise ToolError(str(exc)) from exc
        if not passages:
            return NO_RESULTS
        text = "\n\n".join(f"{p.title}\n{p.text}" for p in passages)
        return text if max_result_chars is None else text[:max_result_chars]

    return Tool(
        name=TOOL_NAME,
        description="Searches Wikipedia and returns the top matching article content.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to search for"}},
            "required": ["query"],
            "additionalProperties": False,
        },
        fn=wiki_search,
    )


def parse_turn(text: str, *, tool_parsing: str = "strict") -> tuple[str, Any]:
    """Classify a turn: ``("tool", ToolCall | ParseError)``, ``("answer", str)`` or ``("none", None)``.

    The first ``<tool>`` pair's body is parsed with ``tool_parsing`` (:data:`~agentgym_turn.parsing.JSON_MODES`):
    ``"strict"`` accepts only a valid JSON object, ``"tolerant"`` also fences, prose and Python literals.
    A ``<tool>`` pair takes precedence over an ``<answer>`` pair in the same turn (the call runs; the early answer
    is ignored), because the system prompt asks for the call before any answer.

        >>> parse_turn("<tool>{'name': 'wiki_search', 'args': {'query': 'Bizet'}}</tool>")[1].message[:12]
        'invalid JSON'
        >>> parse_turn("<tool>{'name': 'wiki_search', 'args': {'query': 'Bizet'}}</tool>", tool_parsing="tolerant")
        ('tool', ToolCall(name='wiki_search', args={'query': 'Bizet'}))
    """
    body = extract_tag(text, "tool")
    if body is not None:
        return "tool", parse_tool_call(body, args_keys=("args", "arguments"), mode=tool_parsing)
    answer = R.final_answer(text)
    if answer is not None:
        return "answer", answer
    return "none", None


class WikiTwoTurnEnv(TurnEnv):
    """Two-turn Wikipedia-search question answering with turn-level and outcome rewards (MT-GRPO).

    ## Description
    The agent answers a factual question. In its first turn it reasons inside ``<reasoning>`` and calls the
    ``wiki_search`` tool once with ``<tool>{"name": "wiki_search", "args": {"query": ...}}</tool>``; the env
    answers with the top article inside ``<result>...</result>``. In its second turn it reasons again and answers
    inside ``<answer>``. Search is Lucene BM25 over the bundled ~10,000 Wikipedia lead sections (CC BY-SA 4.0).

    ## Observation
    A list of chat messages: ``reset`` gives ``[system, user(question)]``; after turn 1 the env gives
    ``[user("<result>\\n...\\n</result>")]`` (or ``[user("Error: ...")]`` when no tool call could be parsed);
    after the final turn ``[]``.

    ## Action
    The assistant's whole turn as one ``str``; any text is accepted.

    ## Rewards
    Turn level, paid at turn 1 (components ``tool_execution``, ``search_answer``):
        * 0.2 if the turn holds a properly formatted ``<tool>`` call whose response does not begin with
          ``"Error:"``. Properly formatted (§3.1, and the prompt's "Tool calls must be valid JSON") means the first
          ``<tool>`` pair holds one valid JSON object ``{"name": ..., "args": {...}}`` and nothing else besides
          whitespace: a Python-literal dict (single quotes), a fenced block or prose around the object is answered
          with ``"Error: invalid JSON ..."``, the search does not run, and the turn earns 0 (``tool_parsing``);
        * 0.5 if any accepted answer occurs (case-insensitive) in the search result (only a call that ran).
    Outcome, paid at the final turn (``answer_presence``, ``exact_match``, ``xml_format``, ``xml_tag_usage``):
        * 0.5 if an accepted answer occurs in the final ``<answer>``;
        * 1.0 if the final ``<answer>``, lowercased and stripped, equals an accepted answer;
        * 0.2 × mean over turns of XML format (40% field presence, 20% spacing, 20% starts with
          ``<reasoning>``, 20% ends with ``</tool>``/``</answer>``);
        * 0.2 × mean over turns of the share of used tags opened and closed exactly once.
    The best episode earns 0.7 at turn 1 and 1.9 at turn 2 (2.6 in all).

    ## Episode End
    Terminated after the second turn, or after the first turn when it answers without calling the tool (the
    turn-level components are then 0 and the outcome is paid at once). Never truncated by the env itself.

    ## Arguments
    ``gym.make("TurnRL/WikiTwoTurn-v2", dataset="wiki", question_set="facts-v1-clean", split="train", top_k=1,
    tool_parsing="strict")``:
        * ``dataset``: ``"wiki"`` (offline questions derived from the corpus) or ``"triviaqa"`` (HF hub).
        * ``question_set``: the offline set (``dataset="wiki"``): ``"facts-v1-clean"`` (default: ``"facts-v1"``
          with its validation and test splits kept apart from train by question text, answer and article),
          ``"facts-v1"`` (templated questions about facts inside the leads, span answers, 27% two-hop; v1's) or
          ``"lead-v0"`` (v0's set, whose answer is the first hit's title); see :mod:`envs.wiki_two_turn.questions`
          for them and their measured difficulty.
        * ``split``: ``"train"``, ``"validation"`` or ``"test"`` (TriviaQA: train/validation).
        * ``tasks``: an explicit list of ``{"question", "answers", "id"?}`` instead of a dataset.
        * ``retriever``: a :class:`~agentgym_turn.retrieval.Retriever`; default the bundled Lucene BM25 index.
        * ``top_k``: articles returned per search (the paper's code returns 1).
        * ``max_result_chars``: cut the result text to this many characters (``None``: no cut).
        * ``max_action_chars``: longer turns are not parsed (treated as malformed).
        * ``tool_parsing``: ``"strict"`` (default, the paper's properly formatted call: one valid JSON object in
          the ``<tool>`` tag) or ``"tolerant"`` (opt-in: also code fences, prose around the object, single quotes
          and Python literals, as v0 did; for warm-starting weak models, not for comparing with the paper).

    ## Version History
    Each version's id makes it; the kwargs give the same env under the newest id:

    * ``TurnRL/WikiTwoTurn-v0`` = ``gym.make("TurnRL/WikiTwoTurn-v2", tool_parsing="tolerant",
      question_set="lead-v0")`` (it warns). v0's ``reference`` scripted policy is now ``title``.
    * ``TurnRL/WikiTwoTurn-v1`` = ``gym.make("TurnRL/WikiTwoTurn-v2", question_set="facts-v1")`` (it warns).
    * ``TurnRL/WikiTwoTurn-v2`` = ``gym.make("TurnRL/WikiTwoTurn-v2")``.

    * v0: the paper's task and rewards, with these choices where it is silent or where we deviate:
      offline questions from the bundled corpus instead of TriviaQA (online users pass ``dataset="triviaqa"``);
      BM25 over lead sections instead of pyserini's ``wikipedia-kilt-doc`` full articles; results are
      ``title\\ntext``; XML format and tag usage are averaged over the agent's turns (as the paper's code does);
      "field presence" is the share of the two schema slots (``<reasoning>``; ``<tool>`` or ``<answer>``) filled,
      and spacing credit needs at least one filled tag; the answer is the first ``<answer>`` pair of the final
      turn; a ``<tool>`` call outranks an ``<answer>`` in turn 1; a turn-1 message with neither gets the paper's
      "Error: Tool command not found ..." reply and the episode goes on to turn 2.
    * v1: tool calls are parsed strictly by default (``tool_parsing="strict"``). v0 read the ``<tool>`` body
      tolerantly, so ``<tool>Sure: {'name': 'wiki_search', 'args': {...}}</tool>`` or a fenced block earned
      ``tool_execution`` 0.2 + ``search_answer`` 0.5 although the paper pays 0.2 only for a properly formatted call
      and the prompt says "Tool calls must be valid JSON". v0's behaviour is ``tool_parsing="tolerant"``.
      The default offline questions are the ``facts-v1`` set: v0's questions were a lead's first sentence minus its
      subject, answered by the first hit's title (searching verbatim and copying the title scored EM 0.94 on
      validation, beside the paper's best trained 7B model at ~0.5, so the turn-level signal never varied). On
      ``facts-v1`` (validation, top-1 BM25) that policy scores EM 0.007; a verbatim search returns a passage
      containing the answer for 0.705 of the questions (search + oracle span); answering without search with the
      most frequent answer scores 0.069. v0's set: ``question_set="lead-v0"``. The ``reference`` scripted policy
      answers with the gold answer when the result contains it (v0's copied the title: that is now ``title``).
    * v2: held-out questions clean by content (``question_set="facts-v1-clean"``): v1's validation questions did
      not repeat and shared no text with train, but 337 of 671 shared an accepted answer with a training question
      (SQuAD-normalised; nationalities and occupations are closed classes) and 83 more had an article that a training
      question (two-hop, through it) also uses; 251 validation questions remain (test: 509 -> 173). Train is
      unchanged; rewards are unchanged (the XML format and tag usage rewards already pay the paper's definitions: a
      turn with two ``<tool>`` calls earns full format credit and loses half its tag-usage credit). New scripted
      policy ``explore``: varied first-turn queries (:mod:`agentgym_turn.queries`), the cold start's default.
    * Every id, no version bump: the episode metrics moved from ``info["episode"]`` to ``info["episode_metrics"]``
      (:data:`agentgym_turn.core.EPISODE_METRICS_KEY`), so Gymnasium's ``RecordEpisodeStatistics`` can add its
      own ``info["episode"]``; rewards, tasks and the metrics themselves are unchanged.
    """

    reward_levels: ClassVar[dict[str, str]] = {
        "tool_execution": "turn",
        "search_answer": "turn",
        "answer_presence": "outcome",
        "exact_match": "outcome",
        "xml_format": "outcome",
        "xml_tag_usage": "outcome",
    }
    shared_attributes: ClassVar[tuple[str, ...]] = ("_retriever", "_tasks", "_tool")
    max_turns: ClassVar[int] = 2

    def __init__(
        self,
        *,
        dataset: str = "wiki",
        split: str = "train",
        tasks: Sequence[Mapping[str, Any]] | None = None,
        retriever: Retriever | None = None,
        top_k: int = 1,
        max_result_chars: int | None = None,
        max_action_chars: int = 32_768,
        tool_parsing: str = "strict",
        question_set: str = CLEAN_SET,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode, max_action_chars=max_action_chars)
        if not isinstance(top_k, int) or top_k < 1:
            raise InvalidArgument(f"top_k={top_k!r} must be an int >= 1.")
        if tool_parsing not in JSON_MODES:
            raise InvalidArgument(
                f"tool_parsing={tool_parsing!r} is not known; use 'strict' (default, the paper's valid JSON call) "
                "or 'tolerant' (also fences, prose and Python literals)."
            )
        self.tool_parsing = tool_parsing
        if max_result_chars is not None and max_result_chars < 1:
            raise InvalidArgument(f"max_result_chars={max_result_chars!r} must be None or >= 1.")
        if tasks is not None:
            self._tasks = tuple(self._validate_task(t) for t in tasks)
            if not self._tasks:
                raise InvalidArgument("tasks=[] is empty; pass at least one {'question', 'answers'} task.")
        elif dataset == "wiki":
            self._tasks = tuple(wiki_questions(split, question_set=question_set))
        elif dataset == "triviaqa":
            self._tasks = tuple(load_triviaqa(split))
        else:
            raise InvalidArgument(f"dataset={dataset!r} is not known; use 'wiki' (offline) or 'triviaqa'.")
        if split not in SPLITS:
            raise InvalidArgument(f"split={split!r} is not one of {SPLITS}.")
        if retriever is None:
            from agentgym_turn.retrieval.lucene import wiki_bm25

            retriever = wiki_bm25()
        self._retriever = retriever
        self._tool = make_wiki_search_tool(retriever, top_k=top_k, max_result_chars=max_result_chars)
        self.system_prompt = SYSTEM_PROMPT.format(tool_descriptions=describe_tool(self._tool))
        self._assistant_turns: list[str] = []
        self._called_tool = False
        self._tool_ok = False

    # ------------------------------------------------------------------ tasks
    def _validate_task(self, task: Mapping[str, Any]) -> dict[str, Any]:
        question, answers = task.get("question"), task.get("answers")
        if not isinstance(question, str) or not question.strip():
            raise InvalidTask(f"a WikiTwoTurn task needs a non-empty 'question' string; got {question!r}.")
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, Sequence) or not answers or not all(isinstance(a, str) for a in answers):
            raise InvalidTask(f"a WikiTwoTurn task needs 'answers', a non-empty list of strings; got {answers!r}.")
        return {**dict(task), "answers": list(answers), "id": task.get("id", f"custom:{question[:60]}")}

    def _sample_task(self) -> dict[str, Any]:
        return dict(self._tasks[int(self.np_random.integers(len(self._tasks)))])

    @property
    def tasks(self) -> tuple[dict[str, Any], ...]:
        """The env's task pool."""
        return self._tasks

    def task_list(self) -> tuple[dict[str, Any], ...]:
        """Every task of the split, in the dataset's order (:meth:`agentgym_turn.core.TurnEnv.task_list`)."""
        return self._tasks

    # ------------------------------------------------------------------ episode
    def _begin(self, task: dict[str, Any]) -> list[Message]:
        self._assistant_turns = []
        self._called_tool = False
        self._tool_ok = False
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": task["question"]}]

    def _state_key(self) -> str:
        """Anchor-state key: turn index + digest of the conversation so far (``TurnEnv.conversation_key``)."""
        return self.conversation_key()

    def _turn(self, text: str) -> TurnResult:
        if len(text) > self.max_action_chars:
            scored = f"[a {len(text)}-character turn, over the {self.max_action_chars}-character limit]"
            self._assistant_turns.append(scored)
            kind, parsed = "oversized", None
        else:
            self._assistant_turns.append(text)
            kind, parsed = parse_turn(text, tool_parsing=self.tool_parsing)
        answers = self.task["answers"]
        if self.turn == 1:
            if kind == "tool":
                self._called_tool = True
                if isinstance(parsed, ParseError):
                    response = f"Error: {parsed.message}"
                else:
                    out = call_tool({TOOL_NAME: self._tool}, parsed.name, parsed.args)
                    response = f"Error: {out.message}" if isinstance(out, ToolFailure) else out
                self._tool_ok = not response.startswith("Error:")
                components = {
                    "tool_execution": R.reward_tool_execution(True, response),
                    "search_answer": R.reward_search_answer(response, answers) if self._tool_ok else 0.0,
                }
                return TurnResult([{"role": "user", "content": f"<result>\n{response}\n</result>"}], components, False)
            components = {"tool_execution": 0.0, "search_answer": 0.0}
            if kind != "answer":
                error = NO_TOOL_ERROR
                if kind == "oversized":
                    error = f"Error: the message is {len(text)} characters long; at most {self.max_action_chars}."
                return TurnResult([{"role": "user", "content": error}], components, False)
            components.update(self._outcome(answers))
            return TurnResult([], components, True)
        return TurnResult([], self._outcome(answers), True)

    def _outcome(self, answers: list[str]) -> dict[str, float]:
        final = self._assistant_turns[-1]
        return {
            "answer_presence": R.reward_answer_presence(final, answers),
            "exact_match": R.reward_exact_match(final, answers),
            "xml_format": R.reward_xml_format(self._assistant_turns),
            "xml_tag_usage": R.reward_xml_tag_usage(self._assistant_turns),
        }

    def _episode_metrics(self) -> dict[str, float]:
        em = self._component_sums.get("exact_match", 0.0) > 0
        return {
            "env/tool_called": float(self._called_tool),
            "env/tool_success": float(self._tool_ok),
            "env/exact_match": float(em),
            "env/answered": float(R.final_answer(self._assistant_turns[-1]) is not None)
            if self._assistant_turns
            else 0.0,
        }


def _question(env: TurnEnv) -> str:
    return env.task["question"]


def _search_call(env: TurnEnv) -> str:
    call = json.dumps({"name": TOOL_NAME, "args": {"query": _question(env)}})
    return f"<reasoning>I will look this up on Wikipedia.</reasoning>\n<tool>{call}</tool>"


def _result_text(env: TurnEnv) -> str | None:
    """The text of the last ``<result>`` (``None`` when the search failed or found nothing)."""
    result = (extract_tag(str(env.history[-1]["content"]), "result") or "").strip()
    if not result or result.startswith("Error:") or result == NO_RESULTS:
        return None
    return result


def title_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Search the question verbatim, then answer with the title of the top result (v0's ``reference``)."""
    if env.turn == 0:
        return _search_call(env)
    result = _result_text(env)
    if result is None:
        return "<reasoning>The search did not help and I do not know.</reasoning>\n<answer>unknown</answer>"
    title = result.split("\n", 1)[0].strip()
    reasoning = f"<reasoning>The top article is about {title}, which fits the question.</reasoning>"
    return f"{reasoning}\n<answer>{title}</answer>"


def reference_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Search the question verbatim; then quote the result's sentence holding a gold answer and answer with it.

    The oracle of the task's search-answer reward: it solves every question whose verbatim search returns the
    answer. When the result does not contain one, it says so and answers with the top result's title.
    """
    if env.turn == 0:
        return _search_call(env)
    result = _result_text(env)
    if result is None:
        return "<reasoning>The search did not help and I do not know.</reasoning>\n<answer>unknown</answer>"
    for answer in env.task["answers"]:
        for sentence in sentences(result.replace("\n", " ")):
            if occurs(sentence, answer):
                reasoning = f"<reasoning>The result says: {sentence.strip()} So the answer is {answer}.</reasoning>"
                return f"{reasoning}\n<answer>{answer}</answer>"
    title = result.split("\n", 1)[0].strip()
    reasoning = f"<reasoning>The result does not say it; my best guess is {title}.</reasoning>"
    return f"{reasoning}\n<answer>{title}</answer>"


@lru_cache(maxsize=1)
def _corpus_titles() -> tuple[str, ...]:
    from agentgym_turn.corpus import load_wiki_summaries

    return tuple(d.title for d in load_wiki_summaries())


#: The first-turn reasoning of :func:`explore_policy`, per query style.
_EXPLORE_REASONING = {
    "verbatim": "I will search Wikipedia for the question as it is asked.",
    "entity": "The question is about {query}; its article should say.",
    "keywords": "I will search for the key words of the question.",
    "paraphrase": "I will search for {query}.",
    "partial": "A short query should do: {query}.",
    "wrong_entity": "I think this is about {query}; I will look it up.",
}


def explore_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Search as a model would try: a query drawn from :func:`agentgym_turn.queries.sample_query` (the question
    verbatim, its main entity, keywords, a paraphrase or a plausible wrong entity from the corpus titles); then
    answer as ``reference`` does (the gold answer quoted from the result when it holds one, else the top title).

    Groups of its episodes differ in turn 1: whether the result holds the answer varies within a group, so
    turn-level credit has something to act on after a cold start on it.
    """
    if env.turn > 0:
        return reference_policy(env, rng)
    style, query = sample_query(_question(env), rng, _corpus_titles())
    call = json.dumps({"name": TOOL_NAME, "args": {"query": query}})
    return f"<reasoning>{_EXPLORE_REASONING[style].format(query=query)}</reasoning>\n<tool>{call}</tool>"


def direct_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Answer at once without the tool, guessing a capitalised phrase of the question (a no-tool floor)."""
    words = [w.strip("?,.;:\"'()") for w in _question(env).split()[1:]]
    capitalised = [w for w in words if w[:1].isupper()]
    guess = capitalised[int(rng.integers(len(capitalised)))] if capitalised else (words[-1] if words else "unknown")
    return f"<reasoning>I think I know this without searching.</reasoning>\n<answer>{guess}</answer>"


WikiTwoTurnEnv.scripted_policies = {
    "reference": reference_policy,
    "title": title_policy,
    "direct": direct_policy,
    "explore": explore_policy,
}
