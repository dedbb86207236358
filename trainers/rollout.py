"""Rollouts: play TurnRL envs with a generation engine (or a scripted policy) into :class:`~trainers.episode.Episode`.

Token-in-token-out. The opening messages are rendered with the chat template once; after that the sequence only
grows by (a) the ids the actor generated (``loss_mask`` 1, ``turn_index`` k) and (b) the chat template's *delta*
for the env's feedback messages (``loss_mask`` 0): the conversation is rendered with and without the new messages
and the suffix is tokenised. The prefix invariant is checked every turn: the rendering of the conversation so far
must extend the prompt text of the turn, and (``check_prefix=True``) the decoded ids must equal the rendering, so a
template that rewrites history fails loudly instead of training on ids the model never saw.

Worked example (ChatML, SmolLM2): prompt ``<|im_start|>system ...<|im_end|>\\n<|im_start|>user\\nQ<|im_end|>\\n
<|im_start|>assistant\\n`` (mask 0); generated ``<tool>...</tool><|im_end|>`` (mask 1, turn 0); delta
``\\n<|im_start|>user\\n<result>...<|im_end|>\\n<|im_start|>assistant\\n`` (mask 0); generated ``<answer>...
<|im_end|>`` (mask 1, turn 1). A turn cut by ``max_new_tokens`` gets the template's end-of-turn text in its delta.

Rewards: each turn's ``Episode.turn_rewards`` entry is the ``info["reward_components"]`` of its ``env.step``, plus,
when the episode ends, that turn's entry of ``info["late_reward_components"]`` (turn-level rewards only known at the
end, such as a judge's per-turn scores; :func:`agentgym_turn.core.with_late_components`). The strategies then see
each turn's raw reward on its own turn, exactly as the env reports it. Anchor-state keys: turn k's
``Episode.state_keys[k]`` is the ``info["state_key"]`` of the ``reset`` (k = 0) or ``step`` before it, the state the
turn acted in; an env that reports none (or misses one) gives ``state_keys=None``.

Group rollouts pose one task to ``G`` envs (``reset(options={"task": task})``); tree rollouts (MT-GRPO) fork the
env (``env.unwrapped.fork()``) into ``G`` children at each of the first ``branch_turns`` turns and continue each
leaf with one sample, giving ``G ** branch_turns`` episodes per task whose ``node_ids`` name the shared nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_turn.core import EPISODE_METRICS_KEY, Message, with_late_components
from agentgym_turn.error import InvalidArgument
from agentgym_turn.policies import ScriptedPolicy, get_scripted_policy
from trainers.engine_api import Engine, Generation, SamplingConfig
from trainers.episode import Episode

#: How :func:`scripted_actor` gives each episode its scripted policy: drawn by weight, or cycled over a task's group.
ASSIGNS: tuple[str, ...] = ("draw", "cycle")


class PrefixInvariantError(RuntimeError):
    """The chat template re-rendered earlier turns differently; training on these ids would be wrong."""


@dataclass(frozen=True)
class RolloutConfig:
    """Limits of one rollout batch.

    Attributes:
        max_new_tokens: at most this many generated tokens per policy turn.
        max_context: the whole sequence (prompt, turns, env messages) stays within this many tokens; an episode
            that would exceed it is cut (``truncated=True``).
        max_turns: policy turns after which an episode still running is cut (``truncated=True``).
        temperature, top_p: sampling.
        check_prefix: decode the ids every turn and compare them with the template's rendering.
    """

    max_new_tokens: int = 128
    max_context: int = 2048
    max_turns: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    check_prefix: bool = True

    def __post_init__(self) -> None:
        if self.max_context <= self.max_new_tokens:
            raise InvalidArgument(
                f"max_context={self.max_context} must exceed max_new_tokens={self.max_new_tokens}; raise max_context."
            )
        if self.max_turns < 1:
            raise InvalidArgument(f"max_turns={self.max_turns} must be >= 1.")


# ---------------------------------------------------------------------------------------------------- chat template
def render(tokenizer: Any, messages: Sequence[Message], *, generation_prompt: bool) -> str:
    """The chat template's text for ``messages`` (no tokenisation)."""
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of template text (special tokens in the text are recognised; no BOS/EOS added)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """Exact text of ``ids`` (special tokens kept, no clean-up), the inverse of :func:`encode` on template text."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def ends_with_stop(gen: Generation, stop_ids: Container[int]) -> bool:
    """Whether ``gen`` ended on one of ``stop_ids`` (``False`` when ``max_new_tokens`` cut it)."""
    ids = gen.token_ids
    return gen.finished and bool(ids) and ids[-1] in stop_ids


def turn_text(tokenizer: Any, gen: Generation, stop_ids: Container[int]) -> str:
    """The text ``env.step`` gets for ``gen``: its ids decoded, without the stop token that ended it."""
    ids = list(gen.token_ids)
    return decode(tokenizer, ids[:-1] if ends_with_stop(gen, stop_ids) else ids)


def turn_delta(
    tokenizer: Any,
    history: Sequence[Message],
    new_messages: Sequence[Message],
    *,
    stop_text: str | None,
    generation_prompt: bool = True,
) -> list[int]:
    """Token ids that follow the assistant's last turn in ``history`` when ``new_messages`` are appended.

    ``history`` ends with the assistant message whose ids were generated; ``stop_text`` is the text of the stop
    token the generation ended with (it is already in the sequence), or ``None`` when the turn was cut by the
    token budget (the template's end-of-turn text is then part of the delta). Raises
    :class:`PrefixInvariantError` when the template does not extend the earlier rendering.
    """
    if not history or history[-1].get("role") != "assistant":
        raise InvalidArgument("turn_delta needs a history that ends with the assistant's turn.")
    prompt = render(tokenizer, history[:-1], generation_prompt=True)
    before = render(tokenizer, history, generation_prompt=False)
    content = history[-1]["content"]
    if not before.startswith(prompt + content):
        raise PrefixInvariantError(
            "the chat template does not render the assistant turn as prompt + generated text; this template "
            "rewrites turns, so token-in-token-out is impossible with it. "
            f"Rendered tail: {before[len(prompt) :]!r:.200}"
        )
    tail = before[len(prompt) + len(content) :]
    if stop_text is not None:
        if not tail.startswith(stop_text):
            raise PrefixInvariantError(
                f"the template ends the assistant turn with {tail[:40]!r}, not the generated stop token {stop_text!r}."
            )
        tail = tail[len(stop_text) :]
    if new_messages:
        after = render(tokenizer, [*history, *new_messages], generation_prompt=generation_prompt)
        if not after.startswith(before):
            raise PrefixInvariantError(
                "rendering the conversation with the env's new messages changed the earlier text (prefix invariant "
                f"violated) at char {_first_diff(before, after)}; use a template that only appends."
            )
        tail += after[len(before) :]
    return encode(tokenizer, tail) if tail else []


def _first_diff(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


# ---------------------------------------------------------------------------------------------------- actors
Actor = Callable[[list["Slot"], list[int]], list[Generation]]
"""Given active slots and each one's token budget, return one :class:`Generation` per slot."""


def engine_actor(engine: Engine, cfg: RolloutConfig, seed: int | None = None) -> Actor:
    """An actor that samples every active slot in one engine batch (seeded once per call when ``seed`` is set)."""
    calls = [0]

    def act(slots: list[Slot], budgets: list[int]) -> list[Generation]:
        sampling = SamplingConfig(
            max_new_tokens=max(budgets),
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=None if seed is None else seed + 7919 * calls[0],
        )
        calls[0] += 1
        gens = engine.generate([s.token_ids for s in slots], sampling)
        return [_clip(g, b) for g, b in zip(gens, budgets, strict=True)]

    return act


def _clip(gen: Generation, budget: int) -> Generation:
    if len(gen.token_ids) <= budget:
        return gen
    return Generation(gen.token_ids[:budget], gen.logprobs[:budget], finished=False)


def scripted_actor(
    tokenizer: Any, stop_id: int, policies: Sequence[str], weights: Sequence[float] | None, assign: str = "draw"
) -> Actor:
    """An actor that plays each slot's scripted policy (chosen per episode) and tokenises its text + ``stop_id``.

    The ids get log-prob 0 (they are demonstrations, not samples). Which policy a slot plays is chosen once per
    episode: ``assign="draw"`` draws it from ``policies`` with ``weights`` by the slot's rng; ``assign="cycle"``
    gives member j of a task's group ``policies[j % len(policies)]`` (weights unused), so a group of
    ``len(policies)`` episodes holds one demonstration of each.
    """
    if assign not in ASSIGNS:
        raise InvalidArgument(f"assign={assign!r} is not a way to give episodes their policy; use one of {ASSIGNS}.")
    probs = None if weights is None else np.asarray(weights, dtype=float) / float(np.sum(weights))

    def act(slots: list[Slot], budgets: list[int]) -> list[Generation]:
        gens = []
        for slot, budget in zip(slots, budgets, strict=True):
            if slot.policy_name is None and assign == "cycle":
                slot.policy_name = policies[slot.member % len(policies)]
            elif slot.policy_name is None:
                slot.policy_name = str(slot.rng.choice(list(policies), p=probs))
            policy: ScriptedPolicy = get_scripted_policy(slot.env, slot.policy_name)
            ids = [*encode(tokenizer, policy(slot.env.unwrapped, slot.rng)), stop_id]
            gens.append(_clip(Generation(ids, [0.0] * len(ids), finished=True), budget))
        return gens

    return act


# ---------------------------------------------------------------------------------------------------- slots
@dataclass
class Slot:
    """One episode in progress (an env, its conversation, and the token record so far)."""

    env: gym.Env
    env_id: str
    group: int
    rng: np.random.Generator
    messages: list[Message]
    token_ids: list[int]
    loss_mask: list[int] = field(default_factory=list)
    turn_index: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_rewards: list[dict[str, float]] = field(default_factory=list)
    node_ids: list[str] = field(default_factory=list)
    node: str = ""
    state_keys: list[str | None] = field(default_factory=list)
    next_key: str | None = None
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    policy_name: str | None = None
    member: int = 0  # its place in the task's flat group (0 = the head; a tree's forks keep their root's)

    def fork(self, child: int) -> Slot:
        """A copy at the same state whose env is ``env.unwrapped.fork()``; ``child`` extends the node path."""
        return Slot(
            env=self.env.unwrapped.fork(),
            env_id=self.env_id,
            group=self.group,
            rng=np.random.default_rng(self.rng.integers(1 << 62)),
            messages=[dict(m) for m in self.messages],
            token_ids=list(self.token_ids),
            loss_mask=list(self.loss_mask),
            turn_index=list(self.turn_index),
            logprobs=list(self.logprobs),
            turn_rewards=[dict(r) for r in self.turn_rewards],
            node_ids=list(self.node_ids),
            node=f"{self.node}.{child}" if self.node else str(child),
            state_keys=list(self.state_keys),
            next_key=self.next_key,
            policy_name=self.policy_name,
            member=self.member,
        )

    def to_episode(self, tree: bool) -> Episode:
        levels = dict(getattr(self.env.unwrapped, "reward_levels", {}))
        return Episode(
            env_id=self.env_id,
            group=self.group,
            token_ids=np.asarray(self.token_ids, dtype=np.int64),
            loss_mask=np.asarray(self.loss_mask, dtype=np.int8),
            turn_index=np.asarray(self.turn_index, dtype=np.int32),
            logprobs=np.asarray(self.logprobs, dtype=np.float32),
            turn_rewards=self.turn_rewards,
            reward_levels=levels,
            terminated=self.terminated,
            truncated=self.truncated,
            node_ids=list(self.node_ids) if tree else None,
            state_keys=None if None in self.state_keys else [str(k) for k in self.state_keys],
            metrics=dict(self.metrics),
        )


def start_slot(
    env: gym.Env, env_id: str, group: int, tokenizer: Any, seed: int, task: dict | None = None
) -> tuple[Slot, dict]:
    """Reset ``env`` (on ``task`` when given) and render its opening messages as the prompt."""
    messages, info = env.reset(seed=seed, options=None if task is None else {"task": task})
    prompt = encode(tokenizer, render(tokenizer, messages, generation_prompt=True))
    slot = Slot(
        env=env,
        env_id=env_id,
        group=group,
        rng=np.random.default_rng(seed),
        messages=list(messages),
        token_ids=prompt,
        loss_mask=[0] * len(prompt),
        turn_index=[-1] * len(prompt),
        logprobs=[0.0] * len(prompt),
        next_key=info.get("state_key"),
    )
    return slot, env.unwrapped.task


@dataclass
class RolloutStats:
    """What one batch cost: generated (policy) tokens, all tokens, and wall time of the whole batch."""

    policy_tokens: int = 0
    total_tokens: int = 0
    seconds: float = 0.0
    episodes: int = 0


def play(
    slots: list[Slot],
    actor: Actor,
    tokenizer: Any,
    stop_ids: Sequence[int],
    cfg: RolloutConfig,
    *,
    branch: int = 1,
    branch_turns: int = 0,
) -> list[Slot]:
    """Advance every slot turn by turn (all active slots in one actor call per turn) until all are done.

    With ``branch > 1`` each slot is forked into ``branch`` children before each of its first ``branch_turns``
    turns (tree rollouts); returns every finished slot (the leaves).
    """
    stop_text = {int(s): decode(tokenizer, [int(s)]) for s in stop_ids}
    finished: list[Slot] = []
    active = slots
    for turn in range(cfg.max_turns):
        if branch > 1 and turn < branch_turns:
            active = [s.fork(c) for s in active for c in range(branch)]
        elif branch > 1:
            for s in active:  # a single continuation still gets its own node id
                s.node = f"{s.node}.0"
        budgets = [min(cfg.max_new_tokens, cfg.max_context - len(s.token_ids)) for s in active]
        gens = actor(active, budgets)
        still: list[Slot] = []
        for slot, gen in zip(active, gens, strict=True):
            _apply_turn(slot, gen, turn, tokenizer, stop_text, cfg, last_turn=turn == cfg.max_turns - 1)
            (finished if slot.done else still).append(slot)
        active = still
        if not active:
            break
    for slot in active:  # ran out of turns
        cut(slot)
        finished.append(slot)
    return finished


def cut(slot: Slot) -> None:
    """End ``slot``'s episode at a rollout limit (``max_turns``, ``max_context``): ``truncated=True``, and the env
    pays what a cut episode gets (``TurnEnv.truncate``: in a judge-scored env the worst finished outcome, never
    better than failing) on the last turn played, late scores on their turns."""
    slot.done = slot.truncated = True
    env = slot.env.unwrapped
    if not hasattr(env, "truncate"):  # an env outside the TurnRL contract keeps what it paid
        slot.metrics = env.episode_metrics()
        return
    info = env.truncate()
    paid = {k: float(v) for k, v in info.get("reward_components", {}).items()}
    if paid and slot.turn_rewards:
        slot.turn_rewards = with_late_components(slot.turn_rewards, [{}] * (len(slot.turn_rewards) - 1) + [paid])
    slot.turn_rewards = with_late_components(slot.turn_rewards, info.get("late_reward_components"))
    slot.metrics = dict(info[EPISODE_METRICS_KEY])


def _apply_turn(
    slot: Slot,
    gen: Generation,
    turn: int,
    tokenizer: Any,
    stop_text: dict[int, str],
    cfg: RolloutConfig,
    *,
    last_turn: bool,
) -> None:
    ids = list(gen.token_ids)
    ended = ends_with_stop(gen, stop_text)
    text = turn_text(tokenizer, gen, stop_text)
    slot.token_ids += ids
    slot.loss_mask += [1] * len(ids)
    slot.turn_index += [turn] * len(ids)
    slot.logprobs += [float(x) for x in gen.logprobs]
    slot.node_ids.append(f"{slot.group}:{slot.node}")
    slot.state_keys.append(slot.next_key)
    messages, _reward, terminated, truncated, info = slot.env.step(text)
    slot.next_key = info.get("state_key")
    slot.turn_rewards.append({k: float(v) for k, v in info.get("reward_components", {}).items()})
    slot.messages.append({"role": "assistant", "content": text})
    if terminated or truncated:
        # Late turn rewards (a judge's per-turn scores, known at the end) go on the turns they belong to.
        slot.turn_rewards = with_late_components(slot.turn_rewards, info.get("late_reward_components"))
        slot.done, slot.terminated, slot.truncated = True, bool(terminated), bool(truncated)
        slot.metrics = dict(info.get(EPISODE_METRICS_KEY, slot.env.unwrapped.episode_metrics()))
        return
    if last_turn:
        return  # play() marks it truncated
    delta = turn_delta(tokenizer, slot.messages, messages, stop_text=stop_text[ids[-1]] if ended else None)
    slot.messages.extend(messages)
    if len(slot.token_ids) + len(delta) + 1 > cfg.max_context:
        cut(slot)
        return
    slot.token_ids += delta
    slot.loss_mask += [0] * len(delta)
    slot.turn_index += [-1] * len(delta)
    slot.logprobs += [0.0] * len(delta)
    if cfg.check_prefix:
        expected = render(tokenizer, slot.messages, generation_prompt=True)
        if decode(tokenizer, slot.token_ids) != expected:
            raise PrefixInvariantError(
                f"the decoded ids differ from the template's rendering at char "
                f"{_first_diff(decode(tokenizer, slot.token_ids), expected)} after turn {turn} of {slot.env_id}."
            )


# ---------------------------------------------------------------------------------------------------- batches
@dataclass
class EnvPool:
    """Env instances per id, made once and reused across batches (``gym.make`` can be expensive).

    ``make_kwargs`` go to every ``gym.make``; ``kwargs_by_id`` (e.g. the trainers' ``--env-kwarg``) override them
    for one id.
    """

    env_ids: Sequence[str]
    weights: Sequence[float] | None = None
    make_kwargs: dict[str, Any] = field(default_factory=dict)
    kwargs_by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    _envs: dict[str, list[gym.Env]] = field(default_factory=dict)
    _catalogue: list[tuple[str, dict[str, Any]]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.env_ids:
            raise InvalidArgument("EnvPool needs at least one env id, e.g. TurnRL/WikiTwoTurn-v2.")
        if self.weights is not None and (
            len(self.weights) != len(self.env_ids) or any(w < 0 for w in self.weights) or sum(self.weights) <= 0
        ):
            raise InvalidArgument(
                f"env weights {list(self.weights)} must be one non-negative number per env id {list(self.env_ids)}."
            )

    def pick(self, rng: np.random.Generator) -> str:
        """An env id drawn by weight."""
        if len(self.env_ids) == 1:
            return self.env_ids[0]
        p = None if self.weights is None else np.asarray(self.weights, float) / float(np.sum(self.weights))
        return str(rng.choice(list(self.env_ids), p=p))

    def get(self, env_id: str, n: int) -> list[gym.Env]:
        """``n`` env instances of ``env_id`` (made on first need)."""
        envs = self._envs.setdefault(env_id, [])
        while len(envs) < n:
            envs.append(gym.make(env_id, **{**self.make_kwargs, **self.kwargs_by_id.get(env_id, {})}))
        return envs[:n]

    def catalogue(self) -> list[tuple[str, dict[str, Any]]]:
        """Every ``(env id, task)`` of the envs' finite task lists (:meth:`~agentgym_turn.core.TurnEnv.task_list`,
        in ``env_ids`` order), read once per pool: a run's envs and kwargs do not change. Raises
        ``InvalidArgument`` when an env generates its tasks (``task_list()`` is ``None``) or lists none."""
        if self._catalogue is None:
            catalogue = []
            for env_id in self.env_ids:
                base = self.get(env_id, 1)[0].unwrapped
                listed = base.task_list() if hasattr(base, "task_list") else None
                if listed is None:
                    raise InvalidArgument(
                        f"--task-order epoch visits a finite task set once per epoch, but {env_id} generates its "
                        "tasks (its task_list() is None); use --task-order iid for it."
                    )
                if not listed:
                    raise InvalidArgument(f"{env_id} lists no tasks for --task-order epoch; check its split, kwargs.")
                catalogue.extend((env_id, dict(task)) for task in listed)
            self._catalogue = catalogue
        return self._catalogue

    def close(self) -> None:
        for envs in self._envs.values():
            for env in envs:
                env.close()
        self._envs.clear()


def draw_task_seeds(rng: np.random.Generator, n: int) -> list[int]:
    """``n`` task seeds from ``rng``, one per task: the draw :func:`collect` makes after picking the tasks' env ids."""
    return [int(rng.integers(1 << 31)) for _ in range(n)]


def task_seeds(seed: int, n: int) -> list[int]:
    """The task seeds ``collect(..., num_tasks=n, seed=seed)`` poses when the pool holds one env id (picking it
    draws nothing), so scripted and model evaluations of one ``--seed`` play the same tasks."""
    return draw_task_seeds(np.random.default_rng(seed), n)


def distinct_task_seeds(env: gym.Env, seed: int, n: int) -> list[int]:
    """``n`` task seeds posing ``n`` distinct tasks (by the env's ``task_key``: Sokoban's rooms by layout), so a
    held-out evaluation never scores one task twice. It starts from :func:`task_seeds` and replaces, in place, each
    seed whose task an earlier one already posed by the next seed the same generator draws: a task that was not a
    repeat keeps its position (paired comparisons with earlier evaluations of the same seed still pair it), and a
    draw without repeats equals ``task_seeds(seed, n)``. An env without ``task_key`` (not a ``TurnEnv``) gets
    ``task_seeds``. Raises ``InvalidArgument`` when the env's task set holds fewer than ``n`` distinct tasks.

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/Arithmetic-v0")
    >>> seeds = distinct_task_seeds(env, 0, 8)
    >>> len({env.unwrapped.task_key(env.unwrapped.draw_task(s)) for s in seeds})
    8
    """
    base = env.unwrapped
    if not (hasattr(base, "task_key") and hasattr(base, "draw_task")):
        return task_seeds(seed, n)
    rng = np.random.default_rng(seed)
    seeds = draw_task_seeds(rng, n)
    seen: set[str] = set()
    draws, limit = n, 50 * n + 200
    for i in range(n):
        key = base.task_key(base.draw_task(seeds[i]))
        while key in seen:
            if draws >= limit:
                name = env.spec.id if env.spec is not None else type(base).__name__
                raise InvalidArgument(
                    f"the held-out tasks of {name} hold only {len(seen)} distinct tasks in {draws} draws; evaluate "
                    f"at most {len(seen)} tasks (--eval-tasks / --episodes)."
                )
            (seeds[i],) = draw_task_seeds(rng, 1)
            draws += 1
            key = base.task_key(base.draw_task(seeds[i]))
        seen.add(key)
    return seeds


def epoch_tasks(pool: EnvPool, seed: int, start: int, n: int) -> list[tuple[str, dict[str, Any]]]:
    """Positions ``start`` .. ``start + n - 1`` of the epoch order over every task of the pool's envs
    (:meth:`EnvPool.catalogue`): epoch ``e`` is a permutation of all of them drawn from ``(seed, e)``, and the
    epochs follow each other. A run that takes ``n`` tasks a step from position ``step * n`` sees every task once
    per epoch, each about equally often over a run, and a resumed run picks up where it stopped (the order is a
    function of the position alone). Raises ``InvalidArgument`` when an env generates its tasks (``task_list()`` is
    ``None``) or has none.

    >>> pool = EnvPool(["TurnRL/CreditChain-v0"], make_kwargs={"pairs": "Map"})
    >>> first = epoch_tasks(pool, seed=0, start=0, n=36)  # one whole epoch of the 36 Map training tasks
    >>> len({task["id"] for _, task in first}), first[:8] == epoch_tasks(pool, 0, 0, 8)
    (36, True)
    """
    catalogue = pool.catalogue()
    size, orders, out = len(catalogue), {}, []
    for pos in range(start, start + n):
        epoch, offset = divmod(pos, size)
        if epoch not in orders:
            orders[epoch] = np.random.default_rng([seed, epoch]).permutation(size)
        env_id, task = catalogue[int(orders[epoch][offset])]
        out.append((env_id, dict(task)))  # a copy: the catalogue is read once and kept
    return out


def collect(
    pool: EnvPool,
    actor: Actor,
    tokenizer: Any,
    stop_ids: Sequence[int],
    cfg: RolloutConfig,
    *,
    num_tasks: int,
    group_size: int,
    seed: int,
    tree: bool = False,
    branch_turns: int = 1,
    group_offset: int = 0,
    seeds: Sequence[int] | None = None,
    tasks: Sequence[tuple[str, dict[str, Any]]] | None = None,
) -> tuple[list[Episode], RolloutStats]:
    """Episodes for ``num_tasks`` tasks: ``group_size`` per task (flat groups), or a tree with ``group_size``
    children per state for the first ``branch_turns`` turns (``tree=True``). Tasks and env ids are drawn from
    ``seed`` (``seeds``: these task seeds instead, one per task, e.g. :func:`distinct_task_seeds`; ``tasks``: these
    ``(env id, task)`` pairs, e.g. :func:`epoch_tasks`, posed with ``reset(options={"task": ...})`` while ``seed``
    still seeds each env's own draws); group ids start at ``group_offset``."""
    if seeds is not None and len(seeds) != num_tasks:
        raise InvalidArgument(f"collect() got {len(seeds)} task seeds for num_tasks={num_tasks}; give one per task.")
    if tasks is not None and len(tasks) != num_tasks:
        raise InvalidArgument(f"collect() got {len(tasks)} tasks for num_tasks={num_tasks}; give one per task.")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {}
    plan = []
    for g in range(num_tasks):
        env_id = pool.pick(rng) if tasks is None else tasks[g][0]
        plan.append((g, env_id, counts.get(env_id, 0)))
        counts[env_id] = counts.get(env_id, 0) + (1 if tree else group_size)
    envs = {env_id: pool.get(env_id, n) for env_id, n in counts.items()}
    slots: list[Slot] = []
    drawn = draw_task_seeds(rng, num_tasks) if seeds is None else [int(x) for x in seeds]
    for (g, env_id, first), task_seed in zip(plan, drawn, strict=True):
        given = None if tasks is None else tasks[g][1]
        head, task = start_slot(envs[env_id][first], env_id, group_offset + g, tokenizer, task_seed, given)
        slots.append(head)
        for j in range(1, 1 if tree else group_size):
            slot, _ = start_slot(envs[env_id][first + j], env_id, group_offset + g, tokenizer, task_seed + j, task)
            slot.member = j
            slots.append(slot)
    if tree:
        done = play(slots, actor, tokenizer, stop_ids, cfg, branch=group_size, branch_turns=branch_turns)
    else:
        done = play(slots, actor, tokenizer, stop_ids, cfg)
    done.sort(key=lambda s: (s.group, s.node))
    episodes = [s.to_episode(tree) for s in done]
    stats = RolloutStats(
        policy_tokens=int(sum(int(e.loss_mask.sum()) for e in episodes)),
        total_tokens=int(sum(len(e.token_ids) for e in episodes)),
        seconds=time.perf_counter() - t0,
        episodes=len(episodes),
    )
    return episodes, stats
