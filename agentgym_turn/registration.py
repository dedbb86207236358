"""Every TurnRL env id, registered with Gymnasium when ``agentgym_turn`` is imported.

Gymnasium 1.x no longer loads ``gymnasium.envs`` entry-point plugins, so registration happens on import:
``import agentgym_turn`` (or ``gym.register_envs(agentgym_turn)``, the documented idiom that keeps linters from
dropping the import), or the module-prefixed id ``gym.make("agentgym_turn:TurnRL/WikiTwoTurn-v2")``.
Entry points are strings, so importing this module imports no env code (and no torch, Java or data).

Bump the ``-vN`` suffix whenever an env's rewards or dynamics change, and keep the old id: an env's defaults are its
newest version, and every older id stays registered with the kwargs that give its behaviour back
(:attr:`TurnRLSpec.kwargs`). Making an older id works and warns::

    >>> import warnings, gymnasium as gym
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     env = gym.make("TurnRL/Sokoban-v0")
    >>> env.unwrapped.effective_actions, env.spec.kwargs["effective_actions"]
    ('state-change', 'state-change')
    >>> print(next(str(w.message) for w in caught if str(w.message).startswith("TurnRL/")))  # doctest: +ELLIPSIS
    TurnRL/Sokoban-v0 is out of date: v1's env/effective_action_rate ...; use TurnRL/Sokoban-v2, or TurnRL/Sokoban-v2 \
with effective_actions='state-change', dim=(6, 6), disjoint_held_out=False to keep TurnRL/Sokoban-v0's behaviour.

Gymnasium warns by itself too ("The environment TurnRL/Sokoban-v0 is out of date. You should consider upgrading to
version `v2`."), from ``gym.make`` of a string id only; the warning above says what changed, and comes also when an
older id is made from its spec (vector envs, ``gym.make(env.spec)``).

Each id also carries its held-out tasks (:attr:`TurnRLSpec.held_out`, read with :func:`held_out_kwargs`), the way
Gymnasium's ``EnvSpec`` carries ``reward_threshold``: evaluations and leaderboards take them from here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator, parse_env_id

NAMESPACE = "TurnRL"


@dataclass(frozen=True)
class TurnRLSpec:
    """One registered id.

    Attributes:
        entry_point: ``"module:Class"`` of the env (a string, so registering imports no env code).
        kwargs: the id's default ``gym.make`` kwargs; an older id's are the ones that give its behaviour back.
        held_out: the ``gym.make`` kwargs that pose the held-out tasks evaluations score (``{}``: procedural tasks,
            held out by seed alone).
        outdated: for an id below its env's newest version, what the newer version changed, in one clause of the
            ``DeprecationWarning`` that making it emits; ``""`` for a current id.
    """

    entry_point: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    held_out: Mapping[str, Any] = field(default_factory=dict)
    outdated: str = ""


_WIKI = "envs.wiki_two_turn.env:WikiTwoTurnEnv"
_SEARCH = "envs.search_r1.env:SearchR1Env"
_SOKOBAN = "envs.sokoban.env:SokobanEnv"
_TAU = "envs.tau.env:TauEnv"
_SPEECH = "envs.speech.env:TauSpeechEnv"
_TAU_HELD_OUT = {"split": "test", "output_check": False}
#: every Sokoban id's held-out rooms; under v0/v1's ``disjoint_held_out=False`` the split draws every room (by seed)
_SOKOBAN_HELD_OUT = {"split": "test"}
_SOKOBAN_V2 = (
    "v2 poses 7x7 rooms (6x6 gave about 3,000 distinct layouts, skewed: 41 of the 64 rooms an evaluation with "
    "--seed 12345 posed were among 2,000 training rooms) and keeps held-out room layouts out of training (split="
    "'test' draws only layouts that split='train' never draws)"
)
_TAU_V0 = (
    "v1's scripted customer gives each fact only when the agent asks for it and confirms only the task's gold "
    "writes (v0's recited its scenario and said yes to every confirmation), and with a judge v1 pays raw per-turn "
    "scores as late rewards (a v0 id keeps v1's judge rewards)"
)
_TAU_V2 = (
    "v2 trains on split='train' by default, without the training tasks of a test task's family (v0 and v1 defaulted "
    "to split='test', their held-out split, so a run without kwargs trained on the tasks it was scored on; 22 of "
    "retail's 74 and 4 of airline's 30 training tasks share a gold write or their request with a test task), with "
    "held-out tasks, rewards and customer unchanged"
)
_SPEECH_V0 = f"{_TAU_V0}; the spoken turns follow the customer; {_TAU_V2}"
#: what makes v0/v1 of a τ id: the held-out split as default, the training split as τ²-bench ships it
_TAU_OLD = {"split": "test", "disjoint_held_out": False}

#: id -> :class:`TurnRLSpec`; newest versions first, then the older ids that still make.
ENV_SPECS: dict[str, TurnRLSpec] = {
    "TurnRL/WikiTwoTurn-v2": TurnRLSpec(_WIKI, held_out={"split": "validation"}),
    "TurnRL/SearchR1-v2": TurnRLSpec(_SEARCH, held_out={"dataset": "wiki", "split": "test"}),
    "TurnRL/Sokoban-v2": TurnRLSpec(_SOKOBAN, held_out=_SOKOBAN_HELD_OUT),
    "TurnRL/TauRetail-v2": TurnRLSpec(_TAU, {"domain": "retail"}, _TAU_HELD_OUT),
    "TurnRL/TauAirline-v2": TurnRLSpec(_TAU, {"domain": "airline"}, _TAU_HELD_OUT),
    "TurnRL/TauRetailSpeech-v2": TurnRLSpec(_SPEECH, {"domain": "retail"}, {"split": "test"}),
    "TurnRL/TauAirlineSpeech-v2": TurnRLSpec(_SPEECH, {"domain": "airline"}, {"split": "test"}),
    "TurnRL/Arithmetic-v0": TurnRLSpec("envs.arithmetic:ArithmeticEnv"),
    "TurnRL/CreditChain-v0": TurnRLSpec("envs.credit_chain:CreditChainEnv", held_out={"split": "test"}),
    # ---- older versions: the newest env with the kwargs that give the old behaviour back
    "TurnRL/WikiTwoTurn-v1": TurnRLSpec(
        _WIKI,
        {"question_set": "facts-v1"},
        {"split": "validation"},
        outdated="v2 keeps its held-out questions apart from training by content (facts-v1-clean: v1's validation "
        "split shared an answer or an article with training questions on 420 of 671 questions; 251 remain), with "
        "train and rewards unchanged",
    ),
    "TurnRL/WikiTwoTurn-v0": TurnRLSpec(
        _WIKI,
        {"tool_parsing": "tolerant", "question_set": "lead-v0"},
        {"split": "validation"},
        outdated="v1 parses tool calls strictly (0.2 only for one valid JSON object in <tool>; v0 also paid fenced, "
        "prose-wrapped and Python-literal calls) and asks the facts-v1 questions (v0's lead-v0 questions were "
        "solved by copying the first hit's title)",
    ),
    "TurnRL/SearchR1-v1": TurnRLSpec(
        _SEARCH,
        {"disjoint_held_out": False},
        {"dataset": "wiki", "split": "test"},
        outdated="v2's held-out splits share no question and no gold answer with train (v1's facts-v1 test split "
        "shared an answer with train on 280 of 504 questions; 224 remain), with train and rewards unchanged, and it "
        "adds hops=2|3 bridge questions",
    ),
    "TurnRL/SearchR1-v0": TurnRLSpec(
        _SEARCH,
        {
            "question_set": "lead-v0",
            "retrieval_match": "substring",
            "judge_failure_reward": None,
            "max_information_tokens": None,
            "disjoint_held_out": False,
        },
        {"dataset": "wiki", "split": "test"},
        outdated="v1 pays retrieval only for a gold answer in the retrieved passages' titles and texts as whole words "
        "(v0 matched substrings of the whole <information> block, 'Doc 3(Title:' labels included), pays -1 for a "
        "failed judge (v0 left the component out), caps retrieved content at 500 tokens and asks the facts-v1 "
        "questions (v0: lead-v0)",
    ),
    "TurnRL/Sokoban-v1": TurnRLSpec(
        _SOKOBAN, {"dim": (6, 6), "disjoint_held_out": False}, _SOKOBAN_HELD_OUT, outdated=_SOKOBAN_V2
    ),
    "TurnRL/Sokoban-v0": TurnRLSpec(
        _SOKOBAN,
        {"effective_actions": "state-change", "dim": (6, 6), "disjoint_held_out": False},
        _SOKOBAN_HELD_OUT,
        outdated="v1's env/effective_action_rate counts pushes and the shortest walks to them (001 Fig. 7; v0 "
        f"counted every action that changed the state), with rewards, dynamics and rooms unchanged; {_SOKOBAN_V2}",
    ),
    "TurnRL/TauRetail-v1": TurnRLSpec(_TAU, {"domain": "retail", **_TAU_OLD}, _TAU_HELD_OUT, _TAU_V2),
    "TurnRL/TauAirline-v1": TurnRLSpec(_TAU, {"domain": "airline", **_TAU_OLD}, _TAU_HELD_OUT, _TAU_V2),
    "TurnRL/TauRetailSpeech-v1": TurnRLSpec(_SPEECH, {"domain": "retail", **_TAU_OLD}, {"split": "test"}, _TAU_V2),
    "TurnRL/TauAirlineSpeech-v1": TurnRLSpec(_SPEECH, {"domain": "airline", **_TAU_OLD}, {"split": "test"}, _TAU_V2),
    "TurnRL/TauRetail-v0": TurnRLSpec(
        _TAU, {"domain": "retail", "user": "scripted-v0", **_TAU_OLD}, _TAU_HELD_OUT, f"{_TAU_V0}; {_TAU_V2}"
    ),
    "TurnRL/TauAirline-v0": TurnRLSpec(
        _TAU, {"domain": "airline", "user": "scripted-v0", **_TAU_OLD}, _TAU_HELD_OUT, f"{_TAU_V0}; {_TAU_V2}"
    ),
    "TurnRL/TauRetailSpeech-v0": TurnRLSpec(
        _SPEECH, {"domain": "retail", "user": "scripted-v0", **_TAU_OLD}, {"split": "test"}, _SPEECH_V0
    ),
    "TurnRL/TauAirlineSpeech-v0": TurnRLSpec(
        _SPEECH, {"domain": "airline", "user": "scripted-v0", **_TAU_OLD}, {"split": "test"}, _SPEECH_V0
    ),
}


def _bare(env_id: str) -> str:
    """``"agentgym_turn:TurnRL/Name-v0"`` -> ``"TurnRL/Name-v0"`` (the module prefix ``gym.make`` accepts)."""
    return env_id.rpartition(":")[2]


def _spec(env_id: str) -> TurnRLSpec:
    from agentgym_turn.error import InvalidArgument

    spec = ENV_SPECS.get(_bare(env_id))
    if spec is None:
        raise InvalidArgument(f"{env_id!r} is not a TurnRL id; registered: {sorted(ENV_SPECS)}.")
    return spec


def versions(env_id: str) -> tuple[str, ...]:
    """Every registered id of ``env_id``'s env, newest first: ``versions("TurnRL/Sokoban-v0")`` ->
    ``("TurnRL/Sokoban-v2", "TurnRL/Sokoban-v1", "TurnRL/Sokoban-v0")``."""
    _spec(env_id)  # an unknown id raises
    ns, name, _ = parse_env_id(_bare(env_id))
    mine = [(parse_env_id(i)[2] or 0, i) for i in ENV_SPECS if parse_env_id(i)[:2] == (ns, name)]
    return tuple(i for _, i in sorted(mine, reverse=True))


def held_out_kwargs(env_id: str) -> dict[str, Any]:
    """The ``gym.make`` kwargs that pose ``env_id``'s held-out tasks (``{}`` when its tasks are procedural and held
    out by seed alone): ``held_out_kwargs("TurnRL/WikiTwoTurn-v2")`` -> ``{"split": "validation"}``. A
    module-prefixed id (``"agentgym_turn:TurnRL/..."``) is accepted.

    An id outside TurnRL (a user's env, ``gym.register("MyPkg/Guess-v0", ...)``; ``"my_pkg:MyPkg/Guess-v0"``
    imports ``my_pkg`` first) takes its env class's ``held_out`` attribute (:attr:`TurnEnv.held_out
    <agentgym_turn.core.TurnEnv.held_out>`). An unknown id, or one whose class defines none, raises
    ``InvalidArgument`` naming the fix."""
    from agentgym_turn.error import InvalidArgument

    if _bare(env_id) in ENV_SPECS:
        return dict(ENV_SPECS[_bare(env_id)].held_out)
    cls = env_class(env_id)
    held = getattr(cls, "held_out", None)
    if held is None:
        raise InvalidArgument(
            f"{env_id!r} is not a TurnRL id and its env class {getattr(cls, '__name__', cls)!r} defines no held-out "
            "tasks; give the class held_out = {...}, the gym.make kwargs that pose tasks never used in training "
            "(e.g. {'split': 'test'}; {} when its tasks are procedural and held out by seed alone)."
        )
    return dict(held)


def env_class(env_id: str) -> Any:
    """What ``env_id``'s entry point makes: the env class (or the factory function a user registered).
    ``"module:Namespace/Name-v0"`` imports ``module`` first, as ``gym.make`` does; an unknown id raises
    ``InvalidArgument``."""
    import importlib

    from agentgym_turn.error import InvalidArgument

    module, sep, bare = env_id.rpartition(":")
    if bare in ENV_SPECS:
        return load_env_creator(ENV_SPECS[bare].entry_point)
    if sep:
        importlib.import_module(module)
    if bare not in gym.registry:
        raise InvalidArgument(
            f"{env_id!r} is not a TurnRL id nor another registered env id; register it with gym.register(...) in a "
            "module that is imported first (or prefix the id with that module: 'my_pkg:MyPkg/Name-v0')."
        )
    entry = gym.spec(bare).entry_point
    return load_env_creator(entry) if isinstance(entry, str) else entry


def deprecation_message(env_id: str) -> str:
    """The warning of an older id: what the newest version changed, its id, and the kwargs that make this id."""
    spec, newest = _spec(env_id), versions(env_id)[0]
    if not spec.outdated:
        raise ValueError(f"{env_id!r} is a current id; only older ids have a deprecation message.")
    base = ENV_SPECS[newest].kwargs
    differ = ", ".join(f"{k}={v!r}" for k, v in spec.kwargs.items() if k not in base or base[k] != v)
    old = _bare(env_id)
    return f"{old} is out of date: {spec.outdated}; use {newest}, or {newest} with {differ} to keep {old}'s behaviour."


def _creator_name(env_id: str) -> str:
    """The entry point an older id is registered with: ``TurnRL/Sokoban-v0`` -> ``make_Sokoban_v0``."""
    return "make_" + env_id.split("/")[-1].replace("-", "_")


def _outdated_creator(env_id: str) -> Callable[..., gym.Env]:
    creator = load_env_creator(ENV_SPECS[env_id].entry_point)

    def make_outdated(**kwargs: Any) -> gym.Env:
        # stacklevel 3: the caller of gym.make (this function <- gymnasium's make <- the caller)
        warnings.warn(deprecation_message(env_id), DeprecationWarning, stacklevel=3)
        return creator(**kwargs)

    make_outdated.metadata = getattr(creator, "metadata", {})  # type: ignore[attr-defined]  # gym.make reads it
    return make_outdated


def __getattr__(name: str) -> Callable[..., gym.Env]:
    """The string entry points of older ids (``make_Sokoban_v0``, ...): each warns with :func:`deprecation_message`,
    then makes the env class of the id's :attr:`TurnRLSpec.entry_point`."""
    for env_id, spec in ENV_SPECS.items():
        if spec.outdated and _creator_name(env_id) == name:
            return _outdated_creator(env_id)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_envs() -> None:
    """Register every id in :data:`ENV_SPECS` that is not registered yet (idempotent)."""
    for env_id, spec in ENV_SPECS.items():
        if env_id not in gym.registry:
            entry_point = f"{__name__}:{_creator_name(env_id)}" if spec.outdated else spec.entry_point
            gym.register(id=env_id, entry_point=entry_point, kwargs=dict(spec.kwargs), disable_env_checker=False)


def make_vec(env_id: str, num_envs: int, *, vectorization_mode: str = "async", **kwargs: Any) -> gym.vector.VectorEnv:
    """``gym.make_vec`` for chat envs: sets ``shared_memory=False``, which list-of-message observations need.

    ``vectorization_mode`` is ``"async"`` (one process per env) or ``"sync"``; ``kwargs`` go to every env.
    """
    from agentgym_turn.error import InvalidArgument

    if vectorization_mode not in ("async", "sync"):
        raise InvalidArgument(f"vectorization_mode={vectorization_mode!r}; use 'async' or 'sync'.")
    # spawn, not fork: the parent may run torch's thread pools, which do not survive fork()
    vector_kwargs = {"shared_memory": False, "context": "spawn"} if vectorization_mode == "async" else {}
    return gym.make_vec(
        env_id, num_envs=num_envs, vectorization_mode=vectorization_mode, vector_kwargs=vector_kwargs, **kwargs
    )
