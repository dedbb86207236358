"""The turn contract: :class:`TurnEnv`, the base class of every TurnRL environment.

An episode is a chat. ``reset()`` returns the opening messages (system prompt, task); each ``step(text)`` takes the
assistant's whole turn as one string and returns the environment's feedback messages for the next turn (tool
results, user replies), or ``[]`` when the episode ends, with **this turn's** reward::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/WikiTwoTurn-v2")
    >>> messages, info = env.reset(seed=0)
    >>> [m["role"] for m in messages]
    ['system', 'user']
    >>> call = '<tool>{"name": "wiki_search", "args": {"query": "opera"}}</tool>'
    >>> messages, reward, terminated, truncated, info = env.step("<reasoning>...</reasoning>" + call)
    >>> reward, info["reward_components"]            # the search ran; its results do not hold the answer
    (0.2, {'tool_execution': 0.2, 'search_answer': 0.0})

**Late turn rewards.** Some turn-level rewards are only known when the episode ends (an LLM judge reads the whole
conversation, then scores every turn). The env reports them on the final step, one dict per turn, in
``info["late_reward_components"]`` (``[i]`` belongs to agent turn ``i + 1``, i.e. step ``i + 1``); the components
are declared in ``reward_levels`` as ``"turn"``, carry each turn's *raw* score (a trainer's strategy does any
scaling, once), and are never also in any step's ``reward_components``. The final step's ``reward`` is its own
components plus every late one, so the step rewards still sum to the episode's return. A trainer puts each late
dict on its turn (:func:`with_late_components`)::

    step rewards:  0.0            0.0            1.0 + (1 + 0 + 1)
    components:    {}             {}             {"task": 1.0}
    late:                                        [{"judge": 1}, {"judge": 0}, {"judge": 1}]
    per turn:      {"judge": 1}   {"judge": 0}   {"task": 1.0, "judge": 1}

**Anchor-state keys (optional).** An env may name the state each turn starts from: ``reset`` and every ``step``
then put ``info["state_key"]``, a short hashable string, in their info (reset's key is the state turn 1 acts in;
step ``k``'s key is the state after it, where turn ``k + 1`` acts). Two keys are equal exactly when the env is in
the same state as far as the agent's next turn is concerned, so turns of different episodes (or of the same one)
that start from equal keys can be compared directly: GiGPO's anchor-state groups (``trainers.credit``). A subclass
provides it by overriding :meth:`TurnEnv._state_key`; build keys with :func:`state_digest` (and
:meth:`TurnEnv.conversation_key` when the state is the conversation). What each env's key holds::

    Sokoban       the board (walls, targets, boxes, player): one board reached by different paths is one state
    WikiTwoTurn   turn index + digest of the conversation so far (system prompt, question, turns, tool results)
    SearchR1      turn index + digest of the conversation so far
    τ (+ speech)  turn index + digest of the database state + digest of the dialogue so far (audio by its samples)
    Arithmetic    the problem + turn index (earlier wrong attempts are not part of the key)

Subclasses implement three things: :meth:`TurnEnv._sample_task` (draw a task with ``self.np_random``),
:meth:`TurnEnv._begin` (the opening messages for a task) and :meth:`TurnEnv._turn` (score one assistant turn and
answer it). The base class keeps ``history``, the turn counter, the per-episode reward bookkeeping, the episode
metrics in the final ``info["episode_metrics"]`` (:data:`EPISODE_METRICS_KEY`) and ``fork()``.

**Gymnasium's wrappers.** ``info["episode"]`` is left to Gymnasium: its ``RecordEpisodeStatistics`` (single and
vector) writes ``{"r", "l", "t"}`` there at the episode's end, so the standard stack works on every TurnRL id::

    >>> from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit
    >>> env = RecordEpisodeStatistics(TimeLimit(gym.make("TurnRL/Arithmetic-v0"), 5))
    >>> _ = env.reset(seed=0)
    >>> info = env.step("I do not know.")[-1]
    >>> sorted(info["episode"]), info["episode_metrics"]["env/turns"]
    (['l', 'r', 't'], 1.0)

A ``TimeLimit`` cut (``truncated=True``) happens outside the env, so its ``info`` has Gymnasium's statistics but no
TurnRL metrics; ``env.unwrapped.truncate()`` ends the episode the TurnRL way and returns them (what
``trainers.rollout`` does at its own limits).
"""

from __future__ import annotations

import abc
import copy
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium as gym

from agentgym_turn.error import InvalidArgument, ResetNeeded
from agentgym_turn.spaces import ChatMessages, UnicodeText, is_message

Message = dict[str, Any]
RewardLevel = Literal["turn", "outcome"]

#: The ``info`` key of the episode's metrics (:meth:`TurnEnv.episode_metrics`) on the step (or ``truncate``) that
#: ends an episode. Not ``"episode"``: Gymnasium's ``RecordEpisodeStatistics`` reserves that key for ``{r, l, t}``.
EPISODE_METRICS_KEY = "episode_metrics"


@dataclass
class TurnResult:
    """What a subclass's :meth:`TurnEnv._turn` returns for one assistant turn.

    Attributes:
        messages: the env's feedback for the next turn (``[]`` when the episode ends).
        components: this turn's reward by component; every key must be declared in ``reward_levels``. A component
            that does not apply to this turn is left out (it is not a 0).
        terminated: the episode ended inside the task (answer given, or the turn budget spent).
        info: extra per-turn information (merged into the ``info`` that ``step`` returns).
        late_components: only on the terminating turn, and only for rewards known at the end: one dict per turn of
            the episode (this one included; ``[i]`` is turn ``i + 1``) of ``"turn"``-level components, each turn's
            raw score. ``step`` checks them, adds them to this step's ``reward`` and reports them in
            ``info["late_reward_components"]``. ``None``: nothing late (a judge that failed reports no scores).
    """

    messages: list[Message]
    components: dict[str, float]
    terminated: bool
    info: dict[str, Any] = field(default_factory=dict)
    late_components: list[dict[str, float]] | None = None


def with_late_components(
    turn_components: list[dict[str, float]], late: list[dict[str, float]] | None
) -> list[dict[str, float]]:
    """Each turn's components: what its step paid plus its entry of the final ``info["late_reward_components"]``.

    ``turn_components[i]`` is step ``i + 1``'s ``info["reward_components"]``. A component paid both on time and
    late for the same turn is summed. Raises ``ValueError`` when ``late`` does not have one dict per turn.

        >>> with_late_components([{}, {"task": 1.0}], [{"judge": 1.0}, {"judge": -1.0}])
        [{'judge': 1.0}, {'task': 1.0, 'judge': -1.0}]
    """
    if late is None:
        return [dict(c) for c in turn_components]
    if len(late) != len(turn_components):
        raise ValueError(
            f"late_reward_components has {len(late)} entries for {len(turn_components)} turns; it needs one dict "
            "per turn of the episode."
        )
    out = []
    for paid, extra in zip(turn_components, late, strict=True):
        merged = dict(paid)
        for name, value in extra.items():
            merged[name] = merged.get(name, 0.0) + float(value)
        out.append(merged)
    return out


STATE_KEY_CHARS = 16


def _feed(h: Any, value: Any) -> None:
    """Feed ``value`` into the hash ``h`` with a type tag, so different structures never collide by concatenation."""
    if value is None or isinstance(value, bool | int | float):
        h.update(b"v" + repr(value).encode() + b";")
    elif isinstance(value, str):
        data = value.encode("utf-8", errors="surrogatepass")
        h.update(b"s%d:" % len(data) + data)
    elif isinstance(value, bytes | bytearray):
        h.update(b"b%d:" % len(value) + bytes(value))
    elif isinstance(value, Mapping):
        h.update(b"d%d:" % len(value))
        for key in sorted(value, key=repr):
            _feed(h, key)
            _feed(h, value[key])
    elif isinstance(value, list | tuple | frozenset | set):
        items = sorted(value, key=repr) if isinstance(value, frozenset | set) else value
        h.update(b"l%d:" % len(items))
        for item in items:
            _feed(h, item)
    elif hasattr(value, "tobytes") and hasattr(value, "dtype"):  # numpy arrays (audio), without importing numpy
        h.update(f"a{value.dtype}{getattr(value, 'shape', ())}:".encode() + value.tobytes())
    else:
        raise TypeError(
            f"state_digest cannot hash a {type(value).__name__}; pass str, numbers, lists, dicts or arrays."
        )


def state_digest(*parts: Any) -> str:
    """A short, stable digest (16 hex chars of SHA-1) of ``parts``: str, numbers, bytes, lists, dicts, numpy arrays.

    Equal inputs give equal digests in every process (no ``hash()`` salt), so keys from different workers match.

        >>> state_digest("board", 3) == state_digest("board", 3) != state_digest("board", 4)
        True
    """
    h = hashlib.sha1()
    _feed(h, list(parts))
    return h.hexdigest()[:STATE_KEY_CHARS]


class TurnEnv(gym.Env[list, str], abc.ABC):
    """Base class of a multi-turn chat environment that pays a reward every turn.

    Class attributes a subclass sets:
        reward_levels: ``{component: "turn" | "outcome"}``. A trainer uses it to rebuild any paper's signal:
            outcome-only (OR), merged (MR) or separate turn-level (MT) rewards.
        shared_attributes: names of read-only heavy resources (a search index, a database template, a model
            client) that :meth:`fork` shares instead of copying.
        held_out: for an env registered outside TurnRL, the ``gym.make`` kwargs that pose its held-out tasks,
            disjoint from the training ones (``{}``: procedural tasks, held out by seed alone; ``None``: not
            defined, so evaluations need them given). TurnRL ids keep theirs in the registry
            (:func:`agentgym_turn.registration.held_out_kwargs` reads both).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    reward_levels: ClassVar[dict[str, RewardLevel]] = {}
    shared_attributes: ClassVar[tuple[str, ...]] = ()
    held_out: ClassVar[dict[str, Any] | None] = None

    def __init__(self, *, render_mode: str | None = None, max_action_chars: int = 1 << 20) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise InvalidArgument(
                f"render_mode={render_mode!r} is not supported by {type(self).__name__}; "
                f"use one of {self.metadata['render_modes']} or None."
            )
        if not isinstance(max_action_chars, int) or max_action_chars < 1:
            raise InvalidArgument(f"max_action_chars={max_action_chars!r} must be a positive int.")
        self.render_mode = render_mode
        self.max_action_chars = max_action_chars
        self.action_space = UnicodeText(max_length=max_action_chars * 4)
        self.observation_space = ChatMessages()
        self.history: list[Message] = []
        self.turn = 0
        self._task: dict[str, Any] | None = None
        self._done = True
        self._rewards: list[float] = []
        self._component_sums: dict[str, float] = {}

    # ------------------------------------------------------------------ subclass hooks
    @abc.abstractmethod
    def _sample_task(self) -> dict[str, Any]:
        """Draw a task with ``self.np_random`` (the env's one seeded generator)."""

    def _validate_task(self, task: Mapping[str, Any]) -> dict[str, Any]:
        """Check a task given through ``reset(options={"task": ...})``; raise ``InvalidTask`` naming the fix."""
        return dict(task)

    @abc.abstractmethod
    def _begin(self, task: dict[str, Any]) -> list[Message]:
        """Start an episode on ``task`` and return its opening messages."""

    @abc.abstractmethod
    def _turn(self, text: str) -> TurnResult:
        """Score one assistant turn (``self.turn`` is already its 1-based index) and answer it."""

    def _episode_metrics(self) -> dict[str, float]:
        """Task-specific metrics for the finished episode (namespaced ``env/...``)."""
        return {}

    def _state_key(self) -> str | None:
        """The anchor-state key of the current state (see the module docstring), or ``None``: the env has none."""
        return None

    def conversation_key(self) -> str:
        """``"t<turn>:<digest of history>"``: the key of an env whose state is the conversation so far."""
        return f"t{self.turn}:{state_digest(self.history)}"

    def task_key(self, task: Mapping[str, Any]) -> str:
        """The identity of ``task`` for held-out sets: two tasks with the same key pose the same problem, so an
        evaluation never scores one twice. By default the task's ``id`` where it has one, else its whole content
        (canonical JSON); an env whose tasks can look different and be the same puzzle overrides it (Sokoban:
        the room's layout up to rotation and mirroring)."""
        if task.get("id") is not None:
            return f"id:{task['id']}"
        return "json:" + json.dumps(task, sort_keys=True, default=str)

    def task_list(self) -> Sequence[Mapping[str, Any]] | None:
        """Every task of this env's split, in a fixed order, when the set is finite (a dataset of questions, a
        vocabulary of clues), or ``None`` when tasks are generated (Sokoban's rooms, Arithmetic's expressions: the
        default). Each entry can be posed with ``reset(options={"task": entry})``. The trainers'
        ``--task-order epoch`` reads it to visit every task once per epoch, as a dataset loader would."""
        return None

    def draw_task(self, seed: int) -> dict[str, Any]:
        """The task ``reset(seed=seed)`` poses, without starting an episode (an evaluation's task draw checks its
        tasks are distinct this way, without paying an episode's start: a τ database, a spoken opening). It
        re-seeds the env's generator, as ``reset`` does: call it between episodes, not inside one."""
        gym.Env.reset(self, seed=seed)
        return self._sample_task()

    # ------------------------------------------------------------------ the Gymnasium API
    @property
    def task(self) -> dict[str, Any] | None:
        """The current task (what ``reset`` drew or was given), or ``None`` before the first reset."""
        return self._task

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode. ``options={"task": {...}}`` poses a specific task instead of drawing one."""
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"task"})
        if unknown:
            raise InvalidArgument(
                f"reset(options=...) got unknown keys {unknown}; the only option is 'task', e.g. "
                f"reset(options={{'task': {{...}}}})."
            )
        if options.get("task") is None:
            task = self._sample_task()
        else:
            if not isinstance(options["task"], Mapping):
                raise InvalidArgument(
                    f"reset(options={{'task': ...}}) needs a dict, got {type(options['task']).__name__}."
                )
            task = self._validate_task(options["task"])
        self._task = task
        self.turn = 0
        self._rewards = []
        self._component_sums = {}
        messages = self._begin(task)
        self._check_messages(messages)
        self.history = [dict(m) for m in messages]
        self._done = False
        info: dict[str, Any] = {"task_id": task.get("id")}
        self._add_state_key(info)
        return [dict(m) for m in messages], info

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Play the assistant's turn ``action`` (any text); never raises on its content."""
        if self._done:
            raise ResetNeeded(
                f"{type(self).__name__}.step() was called "
                + ("before reset()" if self._task is None else "after the episode ended")
                + "; call env.reset() first."
            )
        if isinstance(action, bytes | bytearray):
            action = bytes(action).decode("utf-8", errors="replace")
        if not isinstance(action, str):
            raise InvalidArgument(
                f"step() takes the assistant's turn as str, got {type(action).__name__}: {action!r:.80}."
            )
        self.turn += 1
        self.history.append({"role": "assistant", "content": action})
        result = self._turn(action)
        self._check_messages(result.messages)
        reward, late = self._pay(result)
        self._rewards.append(reward)
        self.history.extend(dict(m) for m in result.messages)
        info: dict[str, Any] = {"turn": self.turn, "reward_components": dict(result.components)}
        info.update(result.info)
        if late is not None:
            info["late_reward_components"] = late
        self._add_state_key(info)
        if result.terminated:
            self._done = True
            info[EPISODE_METRICS_KEY] = self.episode_metrics()
        return [dict(m) for m in result.messages], reward, bool(result.terminated), False, info

    def truncate(self) -> dict[str, Any]:
        """End the running episode from outside the task: a trainer's turn or context limit cut it (Gymnasium's
        truncation). Returns what a final step's ``info`` holds: ``reward_components`` (paid on the last turn played),
        ``late_reward_components`` (when scores come late) and ``episode_metrics`` (:data:`EPISODE_METRICS_KEY`: the
        episode's metrics).

        A cut episode is never scored better than a failed one. Where the task's score needs the end (a verifier, an
        LLM judge: τ-bench), the env pays the worst finished outcome (:meth:`_truncation_result`); elsewhere the cut
        episode keeps what its turns paid (a WikiTwoTurn episode cut after its search has no answer, which scores
        as a wrong one).
        """
        if self._done:
            raise ResetNeeded(
                f"{type(self).__name__}.truncate() was called "
                + ("before reset()" if self._task is None else "after the episode ended")
                + "; it ends a running episode."
            )
        info: dict[str, Any] = {"turn": self.turn, "reward_components": {}}
        result = self._truncation_result()
        if result is not None:
            if result.messages or not result.terminated:
                raise ValueError(f"{type(self).__name__}._truncation_result() must end the episode with no messages.")
            reward, late = self._pay(result)
            if self._rewards:
                self._rewards[-1] += reward
            else:
                self._rewards.append(reward)
            info["reward_components"] = dict(result.components)
            info.update(result.info)
            if late is not None:
                info["late_reward_components"] = late
        self._done = True
        info[EPISODE_METRICS_KEY] = self.episode_metrics()
        return info

    def _truncation_result(self) -> TurnResult | None:
        """What a cut episode is paid, by a subclass whose score needs the episode's end (``truncate``): the worst
        outcome a finished episode can get (a ``TurnResult`` with no messages, ``terminated=True``, components for
        the last turn played and, where scores come late, one dict per turn). ``None`` (the default): nothing more.
        """
        return None

    def episode_metrics(self) -> dict[str, float]:
        """The metrics of the episode so far: return, turns, each reward component's sum, task metrics."""
        metrics: dict[str, float] = {"env/return": float(sum(self._rewards)), "env/turns": float(self.turn)}
        for name in self.reward_levels:
            metrics[f"reward/{name}"] = self._component_sums.get(name, 0.0)
        metrics.update(self._episode_metrics())
        return metrics

    def fork(self) -> TurnEnv:
        """An independent copy at the same state (RNG included); read-only resources are shared, not copied."""
        memo: dict[int, Any] = {}
        for name in self.shared_attributes:
            if hasattr(self, name):
                value = getattr(self, name)
                memo[id(value)] = value
        return copy.deepcopy(self, memo)

    def render(self) -> str | None:
        """``render_mode="ansi"``: the conversation so far as text."""
        if self.render_mode != "ansi":
            return None
        lines = []
        for m in self.history:
            content = (
                m["content"]
                if isinstance(m["content"], str)
                else "[" + ", ".join(p.get("type", "?") for p in m["content"]) + "]"
            )
            lines.append(f"[{m['role']}] {content}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ helpers
    def _add_state_key(self, info: dict[str, Any]) -> None:
        key = self._state_key()
        if key is None:
            return
        if not isinstance(key, str) or not key:
            raise TypeError(f"{type(self).__name__}._state_key() returned {key!r}; it must be a non-empty str or None.")
        info["state_key"] = key

    def _pay(self, result: TurnResult) -> tuple[float, list[dict[str, float]] | None]:
        """Check and book a turn's components and late components; returns the reward they add and the late list."""
        for name, value in result.components.items():
            if name not in self.reward_levels:
                raise KeyError(
                    f"{type(self).__name__} paid reward component {name!r} that is not declared in "
                    f"reward_levels {sorted(self.reward_levels)}."
                )
            if not math.isfinite(value):
                raise ValueError(f"{type(self).__name__} computed a non-finite reward {name}={value!r}.")
            self._component_sums[name] = self._component_sums.get(name, 0.0) + float(value)
        reward = float(sum(result.components.values()))
        late = self._check_late(result)
        if late is not None:
            for turn in late:
                for name, value in turn.items():
                    self._component_sums[name] = self._component_sums.get(name, 0.0) + value
            reward += float(sum(v for turn in late for v in turn.values()))
        return reward, late

    def _check_late(self, result: TurnResult) -> list[dict[str, float]] | None:
        """Validate a turn's ``late_components`` (an env bug raises, naming the rule it broke); a clean copy."""
        if result.late_components is None:
            return None
        name = type(self).__name__
        if not result.terminated:
            raise ValueError(f"{name} reported late_components on turn {self.turn}, which does not end the episode.")
        if len(result.late_components) != self.turn:
            raise ValueError(
                f"{name} reported {len(result.late_components)} late_components for an episode of {self.turn} turns; "
                "give one dict per turn ({} for a turn with nothing late)."
            )
        late = []
        for i, turn in enumerate(result.late_components):
            for component, value in turn.items():
                if self.reward_levels.get(component) != "turn":
                    raise KeyError(
                        f"{name} paid late component {component!r} for turn {i + 1}; late components must be declared "
                        f"'turn' in reward_levels {dict(self.reward_levels)}."
                    )
                if not math.isfinite(value):
                    raise ValueError(f"{name} computed a non-finite late reward {component}={value!r} (turn {i + 1}).")
            late.append({component: float(value) for component, value in turn.items()})
        return late

    @staticmethod
    def _check_messages(messages: list[Message]) -> None:
        if not isinstance(messages, list) or not all(is_message(m) for m in messages):
            raise TypeError(f"an env produced malformed chat messages: {messages!r:.200}")
