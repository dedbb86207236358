"""Check that an env keeps the turn contract: :func:`check_turn_env`, the check every TurnRL env passes.

Run it on a new env before training on it; a broken promise raises :class:`TurnContractError`, whose message names
the promise, what the env did, and the fix::

    >>> import gymnasium as gym, agentgym_turn
    >>> from agentgym_turn import check_turn_env
    >>> check_turn_env(gym.make("TurnRL/Arithmetic-v0"))      # passes quietly
    >>> from agentgym_turn.core import TurnEnv, TurnResult
    >>> class Forgetful(TurnEnv):                               # pays a component it never declared
    ...     reward_levels = {"answer": "outcome"}
    ...     def _sample_task(self): return {"id": "t"}
    ...     def _begin(self, task): return [{"role": "user", "content": "Say hi."}]
    ...     def _turn(self, text): return TurnResult([], {"answer": 1.0, "style": 0.1}, True)
    >>> check_turn_env(Forgetful(), hostile=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agentgym_turn.error.TurnContractError: Forgetful breaks the turn contract (step never raises on the agent's text): \
...KeyError("Forgetful paid reward component 'style' that is not declared in reward_levels ['answer']."). Fix: ...

What it checks, in order (each is a promise of ``agentgym_turn.core``; the docstring of each ``_check_*`` says more):

- **declaration**: the env subclasses :class:`~agentgym_turn.core.TurnEnv`, declares ``reward_levels`` (each
  component ``"turn"`` or ``"outcome"``), and keeps the text action and chat-message observation spaces.
- **seeded reset**: the same seed poses the same task and the same opening messages; ``history`` starts with them.
- **steps** (scripted policies and a plain-text player, ``episodes`` seeds each): every step pays a finite float
  that is the sum of its declared ``reward_components`` (plus late turn rewards on the final step, one dict per
  turn, ``"turn"`` components only); ``truncated`` stays ``False``; ``history`` grows by the turn and the feedback;
  the episode ends within ``max_turns`` with ``[]`` and the episode metrics in ``info["episode_metrics"]``
  (``env/return``, ``env/turns`` and ``reward/<component>`` agree with what the steps paid); a step after the end
  raises ``ResetNeeded``; anchor-state keys, when the env has them, are non-empty strings.
- **task list** (an env whose ``task_list()`` is not ``None``): a sequence of task dicts without two of the same
  ``task_key``, each of which ``reset(options={"task": ...})`` poses as itself (the trainers' ``--task-order epoch``).
- **fork**: ``fork()`` copies the state; the fork's steps leave the parent untouched and the parent's the fork, and
  (unless the spec says ``nondeterministic``) the same actions give both the same rewards and messages.
- **hostile actions** (:data:`HOSTILE_ACTIONS`): broken, unclosed and nested tags, 1 MB strings, NUL bytes, lone
  surrogates, invalid UTF-8, JSON fragments, deep nesting, empty and blank text: ``step`` never raises on them.
- **held-out tasks** (a registered env): :func:`agentgym_turn.registration.held_out_kwargs` defines them, the env
  makes with them, and the tasks they pose are not the training tasks of the same seeds (unless the kwargs are
  ``{}``: procedural tasks, held out by seed alone).
- **Gymnasium's** own ``check_env`` (API shapes, seeding), last.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_turn.core import EPISODE_METRICS_KEY, TurnEnv
from agentgym_turn.error import InvalidArgument, ResetNeeded, TurnContractError
from agentgym_turn.spaces import ChatMessages, UnicodeText, is_message

__all__ = ["HOSTILE_ACTIONS", "TurnContractError", "check_turn_env"]

_MB = 1 << 20

#: ``(name, action)`` pairs that ``step`` must take without raising: what a sampling language model can emit.
#: A ``bytes`` action is what a caller may pass undecoded (``TurnEnv.step`` decodes it, replacing bad bytes).
HOSTILE_ACTIONS: tuple[tuple[str, str | bytes], ...] = (
    ("empty string", ""),
    ("whitespace", " \n\t\r\n  \u00a0\u3000"),
    ("plain prose", "I am not sure what to do here."),
    ("unclosed tag", "<answer>42"),
    ("closing tag alone", "</answer></tool></think>"),
    ("empty tags", "<tool></tool><answer></answer><think></think>"),
    ("nested tags", "<answer><answer>1</answer><tool><answer>2</answer></tool></answer>"),
    ("broken tag syntax", "<answer 42 </answer <tool>>{}<</tool> <<>> </>"),
    ("two answers", "<answer>yes</answer> or maybe <answer>no</answer>"),
    ("JSON fragment", '<tool>{"name": "search", "args": {"query": '),
    ("JSON not an object", "<tool>[1, 2, null, true]</tool>"),
    ("JSON with NaN and huge numbers", '<tool>{"name": NaN, "args": {"k": 1e999, "n": -0}}</tool>'),
    ("deeply nested JSON", "<tool>" + "[" * 100_000 + "</tool>"),
    ("bare JSON call", '{"name": "search", "args": {"query": "x"}}'),
    ("code fence", '```json\n{"name": "search"}\n```'),
    ("NUL bytes", "\x00<answer>\x00</answer>\x00"),
    ("control characters", "".join(chr(c) for c in range(32)) + "\x7f\x85\u2028\u2029"),
    ("lone surrogates", "\ud800<answer>\udfff</answer>\udbff"),
    ("surrogate-escaped bytes", b"<answer>\xff\xfe\xc3(</answer>".decode("utf-8", "surrogateescape")),
    ("invalid UTF-8 bytes", b"<answer>\xff\xfe\xc3(\xed\xa0\x80</answer>"),
    ("bidi and zero-width", "\u202e<answer>\u200b42\u200d</answer>\u2066\ufeff"),
    ("emoji and CJK", "👍🏽 日本語 <answer>答え</answer> 🧪"),
    ("huge number", "<answer>" + "9" * 10_000 + "</answer>"),
    ("1 MB of text", "a" * _MB),
    ("1 MB inside a tag", "<answer>" + "x " * (_MB // 2) + "</answer>"),
    ("1 MB of open tags", "<answer>" * (_MB // 8)),
)

#: What the plain-text player says every turn: it never solves a task, so episodes end by the turn budget.
_PLAIN_TURNS = ("Let me think about this.", "I do not know.", "Could you tell me more?", "hello")


def _fail(env: Any, promise: str, got: str, fix: str) -> TurnContractError:
    name = type(env).__name__
    return TurnContractError(f"{name} breaks the turn contract ({promise}): {got}. Fix: {fix}")


def _same(a: Any, b: Any) -> bool:
    """Equality that also holds for messages carrying numpy arrays (audio)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return repr(a) == repr(b)


def _short(value: Any, n: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= n else f"{text[:n]}... ({len(text)} chars)"


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------------------------------------------- the checks
def _check_declaration(env: TurnEnv) -> None:
    """``reward_levels`` names each component's level; the action is text, the observation chat messages."""
    levels = env.reward_levels
    if not isinstance(levels, Mapping) or not levels:
        raise _fail(env, "declared reward components", f"reward_levels is {_short(levels)}",
                    'declare every reward component and its level, e.g. reward_levels = {"hint": "turn", '
                    '"solved": "outcome"}')  # fmt: skip
    bad = {k: v for k, v in levels.items() if not isinstance(k, str) or v not in ("turn", "outcome")}
    if bad:
        raise _fail(
            env,
            "declared reward components",
            f"reward_levels has {_short(bad)}",
            'give each component (a str) the level "turn" (paid for a turn) or "outcome" (for the episode)',
        )
    if not isinstance(env.action_space, UnicodeText) or not isinstance(env.observation_space, ChatMessages):
        raise _fail(
            env,
            "text actions, chat-message observations",
            f"action_space={env.action_space!r}, observation_space={env.observation_space!r}",
            "keep the spaces TurnEnv.__init__ sets (call super().__init__() and do not replace them)",
        )


def _check_gymnasium(env: TurnEnv) -> None:
    """Gymnasium's own env checker (the API shapes, seeding of ``reset``)."""
    from gymnasium.utils.env_checker import check_env

    try:
        check_env(env, skip_render_check=True)
    except Exception as exc:
        raise _fail(env, "Gymnasium's env API", f"gymnasium.utils.env_checker.check_env failed: {exc!r:.600}",
                    "see Gymnasium's message; a TurnEnv gets the API right when it only implements _sample_task, "
                    "_begin and _turn") from exc  # fmt: skip


def _reset(env: TurnEnv, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    try:
        obs, info = env.reset(seed=seed)
    except Exception as exc:
        raise _fail(env, "reset works", f"reset(seed={seed}) raised {exc!r:.400}",
                    "make reset work for any seed (draw tasks with self.np_random)") from exc  # fmt: skip
    if not isinstance(obs, list) or not obs or not all(is_message(m) for m in obs):
        raise _fail(
            env,
            "reset returns the opening messages",
            f"reset(seed={seed}) returned {_short(obs)}",
            'return a non-empty list of {"role": ..., "content": ...} dicts from _begin',
        )
    if not isinstance(info, dict):
        raise _fail(env, "reset returns (messages, info)", f"info is {_short(info)}", "return a dict as info")
    if not _same(env.history, obs) or env.turn != 0:
        raise _fail(
            env,
            "history",
            f"after reset, history={_short(env.history)} and turn={env.turn}",
            "history must start as the opening messages (TurnEnv.reset sets it; call super().reset)",
        )
    _check_state_key(env, info, "reset")
    return obs, info


def _check_state_key(env: TurnEnv, info: Mapping[str, Any], where: str) -> None:
    if "state_key" in info and (not isinstance(info["state_key"], str) or not info["state_key"]):
        raise _fail(
            env,
            "anchor-state keys",
            f"{where}'s info['state_key'] is {info['state_key']!r}",
            "return a non-empty str from _state_key (build it with agentgym_turn.core.state_digest), or None",
        )


def _check_seeded_reset(env: TurnEnv, seed: int) -> None:
    """The same seed poses the same task and the same opening messages (and state key)."""
    obs1, info1 = _reset(env, seed)
    task1 = copy.deepcopy(env.task)
    obs2, info2 = _reset(env, seed)
    if not _same(env.task, task1) or not _same(obs1, obs2):
        raise _fail(env, "seeded reset", f"reset(seed={seed}) twice gave tasks {_short(task1)} and "
                    f"{_short(env.task)}", "draw every random choice of a task from self.np_random (never from "
                    "random, numpy's global generator or the clock)")  # fmt: skip
    if info1.get("state_key") != info2.get("state_key"):
        raise _fail(
            env,
            "anchor-state keys",
            f"reset(seed={seed}) twice gave state keys {info1.get('state_key')!r} and {info2.get('state_key')!r}",
            "derive the key from the state only (state_digest of the board, the task, the history)",
        )


def _check_task_list(env: TurnEnv, seed: int, sample: int = 2) -> None:
    """A listed task set (``task_list()`` not ``None``) holds task dicts with distinct ``task_key``s, and the first,
    the last and up to ``sample`` others pose themselves through ``reset(options={"task": ...})``."""
    listed = env.task_list()
    if listed is None:
        return
    fix = "return every task of the split once, as dicts reset(options={'task': ...}) accepts, or None"
    if isinstance(listed, (str, bytes, Mapping)) or not hasattr(listed, "__len__") or not len(listed):
        raise _fail(env, "task list", f"task_list() returned {_short(listed)}", fix)
    keys: dict[str, int] = {}
    for i, task in enumerate(listed):
        if not isinstance(task, Mapping):
            raise _fail(env, "task list", f"task_list()[{i}] is a {type(task).__name__}", fix)
        key = env.task_key(task)
        if key in keys:
            raise _fail(env, "task list", f"task_list()[{keys[key]}] and [{i}] are the same task ({key})",
                        "list each task once: an epoch would pose a duplicate twice as often")  # fmt: skip
        keys[key] = i
    picks = np.random.default_rng(seed).choice(len(listed), size=min(sample, len(listed)), replace=False)
    for i in sorted({0, len(listed) - 1, *(int(p) for p in picks)}):
        env.reset(seed=seed, options={"task": copy.deepcopy(dict(listed[i]))})
        if env.task_key(env.task) != env.task_key(listed[i]):
            raise _fail(env, "task list", f"reset(options={{'task': task_list()[{i}]}}) posed {_short(env.task)}",
                        "pose a given task as it is (validate it, do not redraw it)")  # fmt: skip


class _Tally:
    """What an episode's steps paid, to compare with its metrics."""

    def __init__(self) -> None:
        self.rewards: list[float] = []
        self.components: dict[str, float] = {}

    def add(self, reward: float, components: Mapping[str, float], late: list[Mapping[str, float]]) -> None:
        self.rewards.append(float(reward))
        for name, value in [*components.items(), *(kv for turn in late for kv in turn.items())]:
            self.components[name] = self.components.get(name, 0.0) + float(value)


def _step(env: TurnEnv, action: str | bytes, what: str) -> tuple[Any, ...]:
    try:
        out = env.step(action)  # type: ignore[arg-type]  # bytes: TurnEnv.step decodes them
    except Exception as exc:
        raise _fail(env, "step never raises on the agent's text", f"step({what}) raised {exc!r:.400}",
                    'turn any text into an error observation ("Error: ...") and the reward it earns; guard '
                    "parsing (json.loads can raise RecursionError, int() ValueError on huge numbers) and cut "
                    "oversized text (self.max_action_chars)") from exc  # fmt: skip
    if not isinstance(out, tuple) or len(out) != 5:
        raise _fail(
            env,
            "step returns 5 values",
            f"step returned {_short(out)}",
            "return (messages, reward, terminated, truncated, info)",
        )
    return out


def _check_step(env: TurnEnv, before: list[dict[str, Any]], turn: int, action: str | bytes, out: tuple[Any, ...],
                tally: _Tally, keyed: bool, what: str) -> bool:  # fmt: skip
    """One step's promises; returns ``terminated``."""
    obs, reward, terminated, truncated, info = out
    if not isinstance(reward, float) or not math.isfinite(reward):
        raise _fail(
            env,
            "a finite float reward every turn",
            f"step({what}) returned reward {reward!r}",
            "return float(sum of this turn's components); a component that does not apply is left out",
        )
    if not isinstance(terminated, bool) or truncated is not False:
        raise _fail(
            env,
            "terminated ends the task, truncated stays False",
            f"step({what}) returned terminated={terminated!r}, truncated={truncated!r}",
            "end the episode with terminated=True when the task ends or its turn budget is spent; "
            "truncated is for limits from outside the task (a trainer's, Gymnasium's TimeLimit)",
        )
    if not isinstance(obs, list) or not all(is_message(m) for m in obs) or not env.observation_space.contains(obs):
        raise _fail(
            env,
            "observations are chat messages",
            f"step({what}) returned {_short(obs)}",
            'return a list of {"role": "user" | "tool" | ..., "content": str} dicts',
        )
    if not isinstance(info, dict) or not isinstance(info.get("reward_components"), dict):
        raise _fail(
            env,
            "declared reward components",
            f"step({what})'s info is {_short(info)}",
            "keep TurnEnv.step's info (it reports the turn's reward_components)",
        )
    components = info["reward_components"]
    undeclared = sorted(set(components) - set(env.reward_levels))
    if undeclared or not all(_finite(v) for v in components.values()):
        raise _fail(
            env,
            "declared reward components",
            f"step({what}) paid {_short(components)}",
            f"pay only components declared in reward_levels {sorted(env.reward_levels)}, as finite numbers",
        )
    late = info.get("late_reward_components") or []
    if late:
        if not terminated or not isinstance(late, list) or len(late) != turn + 1:
            raise _fail(env, "late turn rewards", f"step({what}) on turn {turn + 1} (terminated={terminated}) "
                        f"reported late_reward_components {_short(late)}", "report late rewards only on the step "
                        "that ends the episode, one dict per turn ({} for a turn with none)")  # fmt: skip
        wrong = sorted({k for t in late for k in t if env.reward_levels.get(k) != "turn"})
        if wrong or not all(_finite(v) for t in late for v in t.values()):
            raise _fail(
                env,
                "late turn rewards",
                f"late components {wrong or _short(late)}",
                'declare late components as "turn" in reward_levels and pay finite numbers',
            )
    paid = sum(components.values()) + sum(v for t in late for v in t.values())
    if abs(paid - reward) > 1e-6 * max(1.0, abs(reward)):
        raise _fail(env, "the reward is the sum of its components", f"step({what}) returned reward {reward} but "
                    f"its components {_short(components)} (+ late) sum to {paid}",
                    "let TurnEnv.step compute the reward from TurnResult.components")  # fmt: skip
    tally.add(reward, components, late)
    text = action.decode("utf-8", errors="replace") if isinstance(action, bytes) else action
    expected = [*before, {"role": "assistant", "content": text}, *obs]
    if env.turn != turn + 1 or info.get("turn") != turn + 1 or not _same(env.history, expected):
        raise _fail(
            env,
            "history",
            f"after step({what}) on turn {turn + 1}: turn={env.turn}, info['turn']="
            f"{info.get('turn')!r}, history has {len(env.history)} messages (expected {len(expected)}: the "
            "history before, the assistant's turn, the returned messages)",
            "leave history and turn to TurnEnv.step; return feedback only as TurnResult.messages",
        )
    if keyed:
        if "state_key" not in info:
            raise _fail(
                env,
                "anchor-state keys",
                f"reset reported a state_key but step({what}) did not",
                "return a key from _state_key in every state, or None always",
            )
        _check_state_key(env, info, f"step({what})")
    if terminated:
        if obs:
            raise _fail(
                env,
                "the final step returns []",
                f"step({what}) ended the episode with {_short(obs)}",
                "return TurnResult([], ..., terminated=True): nothing follows the last turn",
            )
        _check_metrics(env, info, tally, what)
    elif not obs:
        raise _fail(env, "a step returns the messages of the next turn", f"step({what}) did not end the episode "
                    "but returned []", "answer every turn that does not end the episode (an error observation "
                    "for a turn that cannot be used)")  # fmt: skip
    return terminated


def _check_metrics(env: TurnEnv, info: Mapping[str, Any], tally: _Tally, what: str) -> None:
    metrics = info.get(EPISODE_METRICS_KEY)
    if not isinstance(metrics, Mapping) or not all(isinstance(k, str) and _finite(v) for k, v in metrics.items()):
        raise _fail(env, "episode metrics at the end", f"the final step({what})'s info[{EPISODE_METRICS_KEY!r}] is "
                    f"{_short(metrics)}", "keep TurnEnv.step's final info; task metrics come from _episode_metrics, "
                    "a dict of finite numbers named env/...")  # fmt: skip
    want = {"env/return": sum(tally.rewards), "env/turns": float(len(tally.rewards))}
    want.update({f"reward/{name}": tally.components.get(name, 0.0) for name in env.reward_levels})
    off = {k: (metrics.get(k), v) for k, v in want.items() if not _finite(metrics.get(k)) or abs(metrics[k] - v) > 1e-6}
    if off:
        raise _fail(
            env,
            "episode metrics at the end",
            f"metrics vs what the steps paid: {_short(off, 300)}",
            "let TurnEnv compute env/return, env/turns and reward/<component>; add only env/... keys",
        )


def _play(env: TurnEnv, policy: Callable[[TurnEnv, np.random.Generator], str | bytes], seed: int, max_turns: int,
          label: str) -> None:  # fmt: skip
    """One whole episode, every step checked."""
    _, info = _reset(env, seed)
    keyed, tally, rng = "state_key" in info, _Tally(), np.random.default_rng(seed)
    for turn in range(max_turns):
        try:
            action = policy(env, rng)
        except Exception as exc:
            raise _fail(
                env,
                "scripted policies play",
                f"{label} raised {exc!r:.300} on turn {turn + 1}",
                "fix the policy (it reads env.task and env.history)",
            ) from exc
        before = list(env.history)
        if _check_step(env, before, turn, action, _step(env, action, f"{label}, turn {turn + 1}"), tally, keyed,
                       f"{label}, turn {turn + 1}"):  # fmt: skip
            break
    else:
        raise _fail(
            env,
            "the turn budget is part of the task",
            f"{label} did not end within {max_turns} turns",
            "end the episode (terminated=True) when its turn budget is spent",
        )
    try:
        env.step("one turn too many")
    except ResetNeeded:
        return
    except Exception as exc:
        raise _fail(
            env,
            "step after the end raises ResetNeeded",
            f"it raised {exc!r:.200}",
            "keep TurnEnv.step (it raises agentgym_turn.error.ResetNeeded)",
        ) from exc
    raise _fail(env, "step after the end raises ResetNeeded", "it returned", "keep TurnEnv.step")


def _plain(env: TurnEnv, rng: np.random.Generator) -> str:
    return _PLAIN_TURNS[env.turn % len(_PLAIN_TURNS)]


def _check_fork(env: TurnEnv, seed: int, deterministic: bool) -> None:
    """``fork()`` copies the state; neither copy's steps reach the other; equal actions, equal results."""
    _reset(env, seed)
    if env.step("Let me think about this.")[2]:
        _reset(env, seed)  # a one-turn task: fork at the start
    child = env.fork()
    if child is env or type(child) is not type(env) or child.turn != env.turn:
        raise _fail(
            env,
            "fork",
            f"fork() returned {_short(child)} at turn {getattr(child, 'turn', None)}",
            "keep TurnEnv.fork (a deep copy that shares only shared_attributes)",
        )
    if not _same(child.history, env.history) or not _same(child.task, env.task):
        raise _fail(
            env, "fork", "the fork's history or task differs from its parent's", "keep TurnEnv.fork (a deep copy)"
        )
    if child.np_random is env.np_random:
        raise _fail(
            env,
            "fork",
            "the fork shares its parent's random generator",
            "do not list the generator in shared_attributes",
        )
    parent_history, parent_turn, parent_key = copy.deepcopy(env.history), env.turn, env._state_key()
    actions = ["<answer>0</answer>", "I do not know.", "hello", "hello"]
    child_out = []
    for action in actions:
        child_out.append(_step(child, action, f"{action!r} on a fork"))
        if child_out[-1][2]:
            break
    if env.turn != parent_turn or not _same(env.history, parent_history) or env._state_key() != parent_key:
        raise _fail(
            env,
            "fork independence",
            "stepping a fork changed its parent's history, turn or state key",
            "keep per-episode state in attributes fork() copies; list only read-only resources in shared_attributes",
        )
    child_history = copy.deepcopy(child.history)
    for action, theirs in zip(actions, child_out, strict=False):
        mine = _step(env, action, f"{action!r} after forking")
        if deterministic and not (
            _same(mine[:3], theirs[:3])
            and all(_same(mine[4].get(k), theirs[4].get(k)) for k in ("reward_components", "state_key"))
        ):
            raise _fail(env, "fork copies the whole state", f"the same action {action!r} gave the parent "
                        f"{_short(mine[:3])} and its fork {_short(theirs[:3])}", "keep all per-episode state in "
                        "attributes fork() copies (RNG included), or register the id with nondeterministic=True "
                        "when a service answers at random")  # fmt: skip
    if not _same(child.history, child_history):
        raise _fail(
            env,
            "fork independence",
            "stepping the parent changed its fork's history",
            "keep per-episode state in attributes fork() copies",
        )


def _check_hostile(env: TurnEnv, seed: int) -> None:
    """Every :data:`HOSTILE_ACTIONS` entry is a valid step: played in a row, a new episode when one ends."""
    _, info = _reset(env, seed)
    keyed, tally, k = "state_key" in info, _Tally(), 0
    for name, action in HOSTILE_ACTIONS:
        what = f"hostile action {name!r}: {_short(action, 60)}"
        if _check_step(env, list(env.history), env.turn, action, _step(env, action, what), tally, keyed, what):
            k += 1
            _, info = _reset(env, seed + k)
            keyed, tally = "state_key" in info, _Tally()


def _task_content(task: Any) -> str:
    return repr({k: v for k, v in dict(task or {}).items() if k != "id"})


def _check_held_out(env: gym.Env, base: TurnEnv, seed: int, draws: int) -> None:
    """A registered env defines held-out tasks, makes with them, and poses no training task there."""
    from agentgym_turn.registration import held_out_kwargs

    spec = env.spec if env.spec is not None else base.spec
    if spec is None:
        return  # not made from an id: nothing is registered to check
    try:
        kwargs = held_out_kwargs(spec.id)
    except InvalidArgument as exc:
        raise _fail(
            base,
            "held-out tasks",
            str(exc),
            "give the env class held_out = {<gym.make kwargs of the "
            "held-out tasks>} ({} when its tasks are procedural and held out by seed alone)",
        ) from exc
    if not kwargs:
        return
    try:
        held = gym.make(spec, **kwargs).unwrapped
    except Exception as exc:
        raise _fail(
            base,
            "held-out tasks",
            f"gym.make({spec.id!r}, **{kwargs!r}) raised {exc!r:.300}",
            "make the held-out kwargs valid arguments of the env",
        ) from exc
    try:
        seeds = range(seed, seed + draws)
        train = set()
        for s in seeds:
            _reset(base, s)
            train.add(_task_content(base.task))
        for s in seeds:
            _reset(held, s)  # type: ignore[arg-type]
            if _task_content(held.task) in train:
                raise _fail(base, "held-out tasks", f"the held-out kwargs {kwargs!r} posed the training task "
                            f"{_short(held.task)} (seed {s})", "draw held-out tasks from a set disjoint from the "
                            "training tasks (another split, other numbers)")  # fmt: skip
    finally:
        held.close()


def check_turn_env(
    env: gym.Env | str,
    *,
    seed: int = 0,
    episodes: int = 2,
    max_turns: int = 100,
    hostile: bool = True,
    held_out: bool = True,
    held_out_draws: int = 4,
) -> None:
    """Check every promise of the turn contract on ``env``; raise :class:`TurnContractError` at the first broken one.

    Args:
        env: an env (wrapped or not; the checks drive ``env.unwrapped``) or an id for ``gym.make``. The env is reset
            and stepped many times; its state afterwards is unspecified.
        seed: the first seed; checks use ``seed``, ``seed + 1``, ...
        episodes: seeds played to the end by the plain-text player and by each of the env class's
            ``scripted_policies`` (more: slower, more tasks seen).
        max_turns: an episode must end within this many turns (the turn budget is part of the task).
        hostile: step on every :data:`HOSTILE_ACTIONS` entry (a few 1 MB strings; ``False`` skips them).
        held_out: check the held-out tasks of a registered env (makes a second env).
        held_out_draws: seeds drawn on each side when comparing held-out with training tasks.

    Raises:
        TurnContractError: naming the broken promise, what the env did, and the fix.
    """
    if isinstance(env, str):
        env = gym.make(env)
    base = env.unwrapped
    if not isinstance(base, TurnEnv):
        raise TurnContractError(
            f"{type(base).__name__} is not a TurnEnv: subclass agentgym_turn.TurnEnv and implement _sample_task, "
            "_begin and _turn."
        )
    spec = env.spec if env.spec is not None else base.spec
    deterministic = not (spec is not None and spec.nondeterministic)
    _check_declaration(base)
    _check_seeded_reset(base, seed)
    _check_task_list(base, seed)
    policies: dict[str, Callable[..., str]] = {"the plain-text player": _plain}
    for name, policy in sorted(getattr(type(base), "scripted_policies", {}).items()):
        policies[f"scripted policy {name!r}"] = policy
    for k in range(episodes):
        for label, policy in policies.items():
            _play(base, policy, seed + k, max_turns, f"{label} (seed {seed + k})")
    _check_fork(base, seed, deterministic)
    if hostile:
        _check_hostile(base, seed)
    if held_out:
        _check_held_out(env, base, seed, held_out_draws)
    _check_gymnasium(base)  # last: the checks above name a broken promise more precisely
