"""τ-bench retail and airline as TurnRL envs: a customer-service agent, a simulated customer, a SQLite database.

Worked example (scripted customer, no LLM needed)::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/TauRetail-v2")
    >>> messages, info = env.reset(seed=0, options={"task": {"id": "0"}})
    >>> [m["role"] for m in messages]
    ['system', 'user']
    >>> call = '<tool_call>{"name": "find_user_id_by_name_zip", "arguments": '
    >>> call += '{"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}}</tool_call>'
    >>> env.step(call)[0]
    [{'role': 'tool', 'name': 'find_user_id_by_name_zip', 'content': 'yusuf_rossi_9620'}]
    >>> messages, reward, terminated, truncated, info = env.step("Sorry, I cannot do that.")
    >>> terminated, reward, info["end_reason"]                # the customer ends it; nothing was exchanged
    (True, 0.0, 'user_stop')
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict
from typing import Any, ClassVar

import numpy as np

from agentgym_turn.core import Message, RewardLevel, TurnEnv, TurnResult, state_digest
from agentgym_turn.error import InvalidArgument, InvalidTask, ServiceError
from agentgym_turn.parsing import ParseError, count_tag, find_tags, parse_tool_call
from agentgym_turn.tools import ToolFailure, call_tool
from envs.tau.data import DomainData, load_domain
from envs.tau.db import Database
from envs.tau.judge import JudgeTurn, TurnJudge, combine_tarl
from envs.tau.toolkit import TRANSFER_TOOL, bind_tools
from envs.tau.user import SCRIPTED_USERS, LLMUser, UserSimulator, has_stop_marker, scenario_text
from envs.tau.verifier import domain_tools, verify, write_tool_names

MAX_TURNS = 30  # TARL Appendix B, max_turns
MAX_CALLS_PER_TURN = 16
_THINK = re.compile(r"<think>.*?</think>", re.S)


def judge_failure_scores(turns: int) -> list[int]:
    """The turn scores a failed judge pays: the worst it could have given (one −1, on the last turn; 0 elsewhere)."""
    return [0] * (turns - 1) + [-1] if turns else []


TOOL_CALL_INSTRUCTIONS = """# Tools

You can call the functions below to help the user. Their signatures, as JSON schemas, are inside <tools></tools>:
<tools>
{tools}
</tools>

To call a function, write a JSON object with the function's name and its arguments inside <tool_call></tool_call>
tags, for example:
<tool_call>{{"name": "get_user_details", "arguments": {{"user_id": "sara_doe_496"}}}}</tool_call>
One turn may hold several calls; they run in order and each result comes back as a message with role "tool".
A turn without any <tool_call> is your reply to the user, who then answers. You may reason inside <think></think>
first; the user never sees it."""


def parse_turn(text: str) -> list[Any] | ParseError | None:
    """The tool calls of an agent turn (``ToolCall`` or ``ParseError`` each), ``None`` for a reply to the user, or a
    ``ParseError`` for the whole turn (unbalanced ``<tool_call>`` tags, too many calls)."""
    visible = _THINK.sub("", text)
    opens, closes = count_tag(visible, "tool_call")
    if opens == 0 and closes == 0:
        return None
    bodies = find_tags(visible, "tool_call")
    if opens != closes or len(bodies) != opens:
        return ParseError(
            f"unbalanced tags: {opens} <tool_call> and {closes} </tool_call>; wrap each call as "
            '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.'
        )
    if len(bodies) > MAX_CALLS_PER_TURN:
        return ParseError(f"{len(bodies)} tool calls in one turn; at most {MAX_CALLS_PER_TURN} are allowed.")
    return [parse_tool_call(body, args_keys=("arguments", "args")) for body in bodies]


def visible_reply(text: str) -> str:
    """What the user sees of an agent turn: the text without ``<think>`` blocks."""
    return _THINK.sub("", text).replace("<think>", "").replace("</think>", "").strip()


# ---------------------------------------------------------------------------------------------- scripted policies
def _call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def oracle_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Perform the task's gold actions (transfer last), then tell the user every ``communicate_info`` and close."""
    base: TauEnv = env  # type: ignore[assignment]
    task = base.task or {}
    actions = [a for a in task["evaluation_criteria"]["actions"] if a["name"] != TRANSFER_TOOL]
    transfer = [a for a in task["evaluation_criteria"]["actions"] if a["name"] == TRANSFER_TOOL]
    info = task["evaluation_criteria"].get("communicate_info") or []
    per_turn = max(1, math.ceil(len(actions) / max(1, base.max_turns - 3)))
    done = sum(1 for m in base.history if m["role"] == "assistant")
    start = done * per_turn
    if start < len(actions):
        return "".join(_call(a["name"], a["arguments"]) for a in actions[start : start + per_turn])
    said = " ".join(str(i) for i in info)
    if transfer:
        if info and not any(said in m["content"] for m in base.history if m["role"] == "assistant"):
            return f"Here is what I found: {said}. Is there anything else?"
        return _call(TRANSFER_TOOL, transfer[0]["arguments"])
    return f"Everything is done. {said}".strip() + " Thank you for contacting us."


def transfer_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """A weak baseline: hand every conversation to a human at once."""
    return _call(TRANSFER_TOOL, {"summary": "The user needs help."})


def no_tools_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """A weak baseline: answer without ever calling a tool."""
    return "I am sorry, but I cannot help with that request."


class TauEnv(TurnEnv):
    """τ-bench customer service (TARL ``003_…`` §2.1, §3.2; data: τ²-bench retail / airline).

    ## Description
    The agent serves a customer of an online retailer (``domain="retail"``: orders, returns, exchanges, address and
    payment changes) or an airline (``domain="airline"``: bookings, changes, cancellations, baggage, certificates),
    following the domain policy and calling tools over a private SQLite copy of the τ²-bench database. The customer
    is simulated: by default a deterministic :class:`~envs.tau.user.ScriptedUser` derived from the task, or an LLM
    playing the task's scenario with τ²-bench's guidelines (``user="URL#MODEL"`` or ``"hf:..."``).

    ## Observation
    ``reset``: a system message (the policy, then the tools as JSON schemas and the call syntax) and the customer's
    first message. ``step``: one ``{"role": "tool", "name": ..., "content": ...}`` message per tool call (errors as
    ``"Error: ..."``), or the customer's reply as a user message (built by :meth:`_user_message`, which speech
    variants override), or ``[]`` when the episode ends.

    ## Action
    The assistant's whole turn as text. Hermes-style calls ``<tool_call>{"name": ..., "arguments": {...}}
    </tool_call>`` (several per turn run in order; ``"args"`` is accepted for ``"arguments"``); a turn without
    ``<tool_call>`` is a reply to the customer (``<think>`` blocks removed). Unbalanced tags, bad JSON, unknown
    tools, missing or ill-typed arguments and writes the tools' rules forbid become ``"Error: ..."`` tool messages.
    An empty reply is an error too. Nothing the agent writes raises.

    ## Rewards
    Known at the final step only; every other step pays ``0`` with no component.
    * ``task`` (outcome): the rule-based verifier's ``R ∈ {0, 1}`` (final DB == DB after replaying the gold actions;
      with ``output_check=True`` also every ``communicate_info`` said), in the final step's ``reward_components``.
    * ``judge`` (turn, only with ``judge=``): each agent turn's raw judge score ``s_i ∈ {-1, 0, 1}`` (at most one
      −1), a late reward in the contract of :mod:`agentgym_turn.core`: the judge needs the whole conversation, so
      the final step reports ``info["late_reward_components"] = [{"judge": s_1}, ..., {"judge": s_T}]`` (entry
      ``i`` is agent turn ``i+1``, step ``i+1``; the final step's reward is ``R + sum(s_i)``) and a trainer's
      rollout puts each score on its own turn. The env applies no scaling: TARL's combination (003 §3.2:
      ``10 R``, ``5 x`` the −1 turn, ``5/T x`` the others) is the trainer's strategy (``tarl``,
      ``tarl_ppo_turn``, ``tarl_ppo_traj`` in ``trainers.credit``), done once there. The env reports the combined
      score as the metric ``env/tarl_score`` (a perfect trajectory: 15) with ``info["tarl_category"]``
      (``perfect``, ``good``, ``good_attempt``, ``failed``) and the scores again in ``info["judge_scores"]``.
    A judge failure is reported in ``info["judge_error"]`` and ``env/judge_ok = 0``, and pays the worst outcome the
    judge could have given (:func:`judge_failure_scores`): ``task = 0`` whatever the verifier said (``env/success``
    still reports it) and a −1 on the last turn (``env/tarl_score`` −5). Anything better could be earned by making
    the judge fail (e.g. with a conversation too long for its context) where it would have scored a −1.

    ## Episode End
    ``terminated`` when the customer's reply holds ``###STOP###``, ``###TRANSFER###`` or ``###OUT-OF-SCOPE###``,
    when ``transfer_to_human_agents`` succeeds, or when ``max_turns`` agent turns are spent (TARL: 30).
    ``truncated`` is never set by the env. A failing LLM customer raises ``ServiceError`` from ``step``. A
    conversation cut from outside (a trainer's turn or context limit, ``TurnEnv.truncate``) never reaches the
    verifier or the judge and is scored as the worst finished one: ``task = 0`` and, with a judge, the judge-failure
    scores (``env/tarl_score`` −5), so running out of turns never pays better than failing.

    ## Arguments
    ``gym.make("TurnRL/TauRetail-v2", split="train", disjoint_held_out=True, user="scripted", judge=None,
    max_turns=30, output_check=False, data_dir=None)``; ``TurnRL/TauAirline-v2`` takes the same. ``split``:
    ``train`` / ``test`` / ``base`` (``split_tasks.json``) or ``all``; the held-out tasks evaluations score are
    ``split="test"`` (``agentgym_turn.held_out_kwargs``). ``disjoint_held_out``: ``split="train"`` leaves out the
    training tasks that overlap a test task (:func:`envs.tau.data.held_out_overlaps`: retail 52 of 74, airline 26
    of 30 remain); other splits are unchanged. ``user``: ``"scripted"``, ``"scripted-v0"`` (v0's customer,
    :class:`~envs.tau.user.ScriptedUserV0`), a chat-model spec or a :class:`~envs.tau.user.UserSimulator`;
    ``judge``: ``None`` or a chat-model spec / ``ChatModel``; ``judge_max_tokens``: the judge's answer budget
    (2048, room for its reasoning; a small local judge needs less); ``user_react``: ReAct format for the LLM
    customer; ``data_dir``: a tau2-bench checkout.

    ## Version History
    Each version's id makes it; the kwargs give the same env under the newest id (the airline ids alike):

    * ``TurnRL/TauRetail-v0`` = ``gym.make("TurnRL/TauRetail-v2", user="scripted-v0", split="test",
      disjoint_held_out=False)`` (it warns). Only the customer is v0's: with ``judge=`` a v0 id pays v1's judge
      rewards (below); v0's judge layout is not kept.
    * ``TurnRL/TauRetail-v1`` = ``gym.make("TurnRL/TauRetail-v2", split="test", disjoint_held_out=False)`` (it
      warns).
    * ``TurnRL/TauRetail-v2`` = ``gym.make("TurnRL/TauRetail-v2")``.

    * v0: initial version. Choices where the sources are ambiguous or buggy: the judge's non-(−1) turns are scaled
      by 5/T (the paper's categories need a cap of 5; its text says 1/T); two or more −1s from the judge keep only
      the earliest; the episode ends on a successful transfer call (τ²-bench waits for the customer's
      ``###TRANSFER###``); ``modify_pending_order_items`` prices each new item from its own variant (τ²-bench
      applies the last variant's price and options to every modified item); ``search_onestop_flight`` computes the
      next day with a calendar (τ²-bench builds an invalid date for days < 9); a write tool that fails half-way
      changes nothing (one transaction); user lookups by name/email ignore case.
    * v1: the default scripted customer no longer leaks its scenario: it opens with its request in its own words
      (no name, id or detail), gives each fact (name, zip, email, ids, items, payment, ...) only when the agent asks
      for it, confirms an action only when it matches one of the task's gold write actions (declining others), and
      never recites its instructions (v0 read ``reason_for_call`` and ``known_info`` aloud and said yes to every
      confirmation). Its rules: :class:`~envs.tau.user.ScriptedUser`. Scores of policies that never ask the customer
      anything (the oracle, ``no_tools``) are unchanged.
      With a judge (same release, same id): the judge's turn scores are late turn rewards, raw and one per turn
      (component ``judge`` in ``info["late_reward_components"]``), and ``task`` is ``R`` with or without a judge.
      v0 paid them already TARL-scaled on the last step (``task = 10 R``, ``judge_major = -5``, ``judge_minor =
      5 Σ s_i / T``) and the trainer's TARL strategies scaled them again (a perfect 6-turn trajectory: 15 in the
      env, 106.25 in ``tarl_score``; a −1 on turn 2 landed on the last token as −12.5). Now the rollout puts each
      score on its turn and the strategies scale once: 15 in ``env/tarl_score`` and in the trainer, and
      ``tarl_ppo_turn`` puts ``5 s_i / T`` (``-5`` for the −1 turn) on turn ``i``'s last token and ``10 R`` on the
      last one (003 eq. 4). A failed judge pays the worst outcome (``task`` 0, −1 on the last turn); v0 kept
      ``10 R`` and left the judge components out, so a failure paid more than a judged −1.
    * Every id, no version bump: the episode metrics moved from ``info["episode"]`` to ``info["episode_metrics"]``
      (:data:`agentgym_turn.core.EPISODE_METRICS_KEY`), so Gymnasium's ``RecordEpisodeStatistics`` can add its
      own ``info["episode"]``; rewards, tasks and the metrics themselves are unchanged.
    * v2: training no longer poses the held-out tasks. v0 and v1 defaulted to ``split="test"``, the split their
      held-out kwargs name, so a trainer run without kwargs trained on exactly the tasks it was scored on. v2
      defaults to ``split="train"`` (held-out: ``test``, unchanged, so scores stay comparable with τ²-bench's test
      split), and leaves out the training tasks of a test task's family (``disjoint_held_out=True``): τ²-bench's
      train and test splits share no task id and no identical scenario, but 22 of retail's 74 training tasks and 4
      of airline's 30 share a gold database write with a test task or ask its request again with a twist (retail
      67 asks word for word what test task 68 asks; airline 15 and 16 differ only in one instruction); 52 and 26
      remain, against 40 and 20 test tasks. Rewards, tools and customers are unchanged. TARL (003 §4.1, App. A)
      trains on none of τ-bench's tasks: on about 3,000 retail tasks it synthesised from APIGen-MT trajectories,
      evaluated on τ-bench's retail test tasks (and airline, unseen); ``split="train"`` is the nearest offline
      stand-in.
    """

    reward_levels: ClassVar[dict[str, RewardLevel]] = {"task": "outcome", "judge": "turn"}
    shared_attributes: ClassVar[tuple[str, ...]] = ("_data", "_judge", "_tasks", "_tool_defs")
    scripted_policies: ClassVar[dict[str, Any]] = {
        "oracle": oracle_policy,
        "transfer": transfer_policy,
        "no_tools": no_tools_policy,
    }

    def __init__(
        self,
        domain: str = "retail",
        *,
        split: str = "train",
        disjoint_held_out: bool = True,
        user: str | UserSimulator = "scripted",
        judge: Any = None,
        judge_max_tokens: int = 2048,
        max_turns: int = MAX_TURNS,
        output_check: bool = False,
        user_react: bool = True,
        data_dir: str | None = None,
        render_mode: str | None = None,
        max_action_chars: int = 1 << 16,
    ) -> None:
        super().__init__(render_mode=render_mode, max_action_chars=max_action_chars)
        if not isinstance(max_turns, int) or max_turns < 1:
            raise InvalidArgument(f"max_turns={max_turns!r} must be a positive int (TARL uses 30).")
        self.domain = domain
        self._data: DomainData = load_domain(domain, data_dir)
        writes = write_tool_names(domain) if disjoint_held_out else None
        self._tasks = self._data.split_tasks(split, disjoint_held_out=writes)
        if not self._tasks:
            raise InvalidArgument(f"split={split!r} of {domain} has no tasks.")
        self.split = split
        self.max_turns = max_turns
        self.output_check = bool(output_check)
        if isinstance(user, str):
            scripted = SCRIPTED_USERS.get(user)
            self._user: UserSimulator = scripted() if scripted else LLMUser(user, react=user_react)
        elif hasattr(user, "start") and hasattr(user, "reply"):
            self._user = user
        else:
            raise InvalidArgument(
                f"user={user!r}: use 'scripted', 'scripted-v0', a chat-model spec 'URL#MODEL' / 'hf:...', "
                "or an object with start(task) and reply(text)."
            )
        if not isinstance(judge_max_tokens, int) or judge_max_tokens < 1:
            raise InvalidArgument(f"judge_max_tokens={judge_max_tokens!r} must be a positive int (default 2048).")
        self._judge: TurnJudge | None = None if judge is None else TurnJudge(judge, max_tokens=judge_max_tokens)
        self._tool_defs = domain_tools(domain)
        self._writes = write_tool_names(domain)
        self._tools_text = "\n".join(
            json.dumps(
                {
                    "type": "function",
                    "function": {"name": d.name, "description": d.description, "parameters": dict(d.parameters)},
                }
            )
            for d in self._tool_defs
        )
        self._db: Database | None = None
        self._first_user_text = ""
        self._turns: list[JudgeTurn] = []
        self._assistant_texts: list[str] = []
        self._tool_calls = 0
        self._tool_errors = 0
        self._result: dict[str, float] = {}

    # ------------------------------------------------------------------ TurnEnv hooks
    def _sample_task(self) -> dict[str, Any]:
        return self._tasks[int(self.np_random.integers(len(self._tasks)))]

    def task_list(self) -> list[dict[str, Any]]:
        """Every task of the split, in the dataset's order (:meth:`agentgym_turn.core.TurnEnv.task_list`)."""
        return list(self._tasks)

    def _validate_task(self, task: Any) -> dict[str, Any]:
        if "evaluation_criteria" in task and "user_scenario" in task:
            return dict(task)
        if "id" in task:
            return self._data.task_by_id(str(task["id"]))
        raise InvalidTask(
            f"a {self.domain} task needs an 'id' of {self.domain}'s tasks.json (e.g. {{'id': '0'}}) or a full "
            f"τ²-bench task with 'user_scenario' and 'evaluation_criteria'; got keys {sorted(task)}."
        )

    def system_prompt(self) -> str:
        """The agent's system prompt: the domain policy, then the tools and the call syntax."""
        return f"{self._data.policy.strip()}\n\n{TOOL_CALL_INSTRUCTIONS.format(tools=self._tools_text)}"

    def _user_message(self, text: str) -> Message:
        """The chat message carrying the customer's ``text`` (speech variants return audio here)."""
        return {"role": "user", "content": text}

    def _begin(self, task: dict[str, Any]) -> list[Message]:
        if self._db is not None:
            self._db.close()
        self._db = Database.fresh(self._data)
        if isinstance(self._user, LLMUser):
            self._user.seed = int(self.np_random.integers(2**31))
        self._first_user_text = self._user.start(task)
        self._turns, self._assistant_texts = [], []
        self._tool_calls = self._tool_errors = 0
        self._result = {}
        return [{"role": "system", "content": self.system_prompt()}, self._user_message(self._first_user_text)]

    def _state_key(self) -> str:
        """Anchor-state key: turn index + digest of the database state + digest of the dialogue so far."""
        db = "none" if self._db is None else self._db.state_hash()
        return f"{self.conversation_key()}:" + state_digest(db)

    def _turn(self, text: str) -> TurnResult:
        assert self._db is not None and self._task is not None
        if len(text) > self.max_action_chars:
            return self._continue(
                text,
                [
                    self._tool_msg(
                        "",
                        f"Error: the turn is {len(text)} characters long; at "
                        f"most {self.max_action_chars} are accepted.",
                    )
                ],
            )
        parsed = parse_turn(text)
        if isinstance(parsed, ParseError):
            return self._continue(text, [self._tool_msg("", f"Error: {parsed.message}")])
        if parsed is not None:
            return self._run_tools(text, parsed)
        reply = visible_reply(text)
        if not reply:
            return self._continue(
                text, [self._tool_msg("", "Error: empty turn; write a message to the user or a <tool_call>.")]
            )
        self._assistant_texts.append(reply)
        user_text = self._user.reply(reply)  # a ServiceError propagates: the conversation cannot go on
        marker = has_stop_marker(user_text)
        self._turns.append(JudgeTurn(text, [f"user: {user_text}"]))
        if marker is not None:
            end = {"###STOP###": "user_stop", "###TRANSFER###": "user_transfer"}.get(marker, "user_out_of_scope")
            return self._finish(end, {"user_reply": user_text})
        return self._maybe_budget([self._user_message(user_text)], {"user_reply": user_text})

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _tool_msg(name: str, content: str) -> Message:
        return {"role": "tool", "name": name, "content": content}

    def _continue(self, text: str, messages: list[Message]) -> TurnResult:
        self._tool_errors += 1
        self._turns.append(JudgeTurn(text, [f"tool: {m['content']}" for m in messages]))
        return self._maybe_budget(messages, {})

    def _run_tools(self, text: str, calls: list[Any]) -> TurnResult:
        assert self._db is not None
        tools = bind_tools(self._tool_defs, self._db.conn)
        messages, records, transferred = [], [], False
        for call in calls:
            self._tool_calls += 1
            if isinstance(call, ParseError):
                out, name, ok = f"Error: {call.message}", "", False
            else:
                result = call_tool(tools, call.name, call.args)
                ok = not isinstance(result, ToolFailure)
                out = result if ok else f"Error: {result.message}"
                name = call.name
                transferred |= ok and call.name == TRANSFER_TOOL
            self._tool_errors += not ok
            messages.append(self._tool_msg(name, out))
            records.append({"name": name, "ok": ok, "write": name in self._writes})
        self._turns.append(JudgeTurn(text, [f"tool ({m['name'] or '?'}): {m['content']}" for m in messages]))
        if transferred:
            return self._finish("transfer", {"tool_calls": records})
        return self._maybe_budget(messages, {"tool_calls": records})

    def _maybe_budget(self, messages: list[Message], info: dict[str, Any]) -> TurnResult:
        if self.turn >= self.max_turns:
            return self._finish("max_turns", info)
        return TurnResult(messages, {}, False, info)

    def _finish(self, reason: str, info: dict[str, Any]) -> TurnResult:
        assert self._db is not None and self._task is not None
        verdict = verify(self._data, self._task, self._db, self._assistant_texts, output_check=self.output_check)
        info = {**info, "end_reason": reason, "verifier": asdict(verdict)}
        self._result = {"env/success": verdict.reward, "env/db_match": float(verdict.db_match)}
        if verdict.communicate is not None:
            self._result["env/communicate"] = float(verdict.communicate)
        components = {"task": verdict.reward}
        if self._judge is None:
            return TurnResult([], components, True, info)
        try:
            judged = self._judge.judge(
                self._data.policy,
                scenario_text(self._task),
                self._task["evaluation_criteria"]["actions"],
                self._first_user_text,
                self._turns,
                seed=int(self.np_random.integers(2**31)),
            )
        except ServiceError as exc:
            info["judge_error"] = str(exc)
            self._result["env/judge_ok"] = 0.0
            scores = judge_failure_scores(len(self._turns))
            self._result["env/tarl_score"] = combine_tarl(0.0, scores).total
            late = [{"judge": float(s)} for s in scores]
            return TurnResult([], {"task": 0.0}, True, info, late_components=late)
        tarl = combine_tarl(verdict.reward, judged.scores)
        info.update(
            judge_scores=judged.scores,
            tarl_category=tarl.category,
            judge_violations=judged.violations,
            judge_raw=judged.raw,
        )
        self._result.update({"env/judge_ok": 1.0, "env/tarl_score": tarl.total})
        late = [{"judge": float(s)} for s in judged.scores]
        return TurnResult([], components, True, info, late_components=late)

    def _truncation_result(self) -> TurnResult:
        """A conversation cut before its end (a trainer's turn or context limit) never reaches the verifier or the
        judge; it is scored as the worst finished one: the task failed (0) and, with a judge, the worst turn scores
        a judge gives (:func:`judge_failure_scores`: TARL -5, a failed trajectory)."""
        self._result = {"env/success": 0.0, "env/db_match": 0.0}
        info: dict[str, Any] = {"end_reason": "truncated"}
        if self._judge is None:
            return TurnResult([], {"task": 0.0}, True, info)
        scores = judge_failure_scores(self.turn)
        self._result["env/tarl_score"] = combine_tarl(0.0, scores).total
        return TurnResult([], {"task": 0.0}, True, info, late_components=[{"judge": float(x)} for x in scores])

    def _episode_metrics(self) -> dict[str, float]:
        return {**self._result, "env/tool_calls": float(self._tool_calls), "env/tool_errors": float(self._tool_errors)}

    @property
    def database(self) -> Database | None:
        """This episode's private database (``None`` before the first reset)."""
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        super().close()
