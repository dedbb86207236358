"""The leaderboard metrics of each env family, as the papers report them, in one registry.

A :class:`Family` names the paper table it reproduces, the env ids it covers, the evaluation defaults (held-out
split, trials per task) and its :class:`Column` s. A column is either the mean over tasks of one episode metric
(``kind="mean"``) or τ-bench's pass^k over the trials of each task (``kind="pass_k"``). :func:`compute_metrics`
turns the episodes of one run into a :class:`MetricValue` per column, each with a bootstrap confidence interval
over tasks::

    >>> eps = [EpisodeResult(0, 0, {"env/success": 1.0}), EpisodeResult(0, 1, {"env/success": 0.0}),
    ...        EpisodeResult(1, 0, {"env/success": 1.0}), EpisodeResult(1, 1, {"env/success": 1.0})]
    >>> m = compute_metrics(FAMILIES["tau"], eps, trials=2)
    >>> m["pass^1"].estimate, m["pass^2"].estimate, "pass^3" in m      # (0.5 + 1) / 2 and (0 + 1) / 2
    (0.75, 0.5, False)

Keys of the families (what ``--env`` ids map to): ``wiki_two_turn`` (``000_…`` Table 2), ``search_r1``
(``001_…`` Table 2), ``sokoban`` (``001_…`` Table 5), ``tau`` (``003_…`` Tables 1–2), ``arithmetic`` (TARL's math
half, no paper table), ``speech`` (``003_…`` Table 3, registered once its envs exist).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agentgym_turn.error import InvalidArgument
from agentgym_turn.metrics import bootstrap_ci, pass_hat_k_ci
from agentgym_turn.registration import held_out_kwargs, versions

BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Column:
    """One reported number of a family's table.

    Attributes:
        key: the metric's name in a result row (``metrics[key]``), e.g. ``"exact_match"`` or ``"pass^2"``.
        label: the table header, with the paper's value range when it gives one.
        source: the episode metric it is computed from (``info["episode_metrics"]`` key), e.g. ``"reward/exact_match"``.
        kind: ``"mean"`` (mean over tasks of the per-task mean over trials) or ``"pass_k"`` (pass^k, 0/1 source).
        k: the k of pass^k.
        scale: the table shows ``value * scale`` (τ-bench reports percentages).
    """

    key: str
    label: str
    source: str
    kind: Literal["mean", "pass_k"] = "mean"
    k: int = 1
    scale: float = 1.0


@dataclass(frozen=True)
class Family:
    """The leaderboard definition of one env family.

    Attributes:
        name: registry key.
        title: section title of the README.
        paper: which seed table the columns reproduce.
        env_ids: the ids evaluated with these columns: the current versions (one table each, :attr:`table_ids`),
            then their older versions, whose rows join the current version's table.
        columns: the reported numbers, in table order.
        trials: default trials per task (pass^k needs k of them).
        temperature: default sampling temperature of a model (trials of a greedy model would all be equal).
        max_turns: default policy-turn budget of a model episode (the env's own budget when it is smaller).
        max_new_tokens: default token budget per model turn.
        env_kwargs: ``gym.make`` kwargs of the evaluation, merged under ``--env-kwarg``: the registry's held-out
            kwargs of the family's ids (:func:`agentgym_turn.registration.held_out_kwargs`).
        group_by: columns that tell rows apart: an env kwarg (SearchR1's ``dataset``) or a name of ``env_groups``.
        env_groups: ``{column: {env_id: value}}`` for group columns fixed by the env id (speech's eval mode).
        also_show: ``{env_id: other ids}`` whose runs join ``env_id``'s table (speech shows the text env's runs).
        notes: what a reader needs to compare our rows with the reported ones.
    """

    name: str
    title: str
    paper: str
    env_ids: tuple[str, ...]
    columns: tuple[Column, ...]
    trials: int = 1
    temperature: float = 0.0
    max_turns: int = 8
    max_new_tokens: int = 128
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    group_by: tuple[str, ...] = ()
    env_groups: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    also_show: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    notes: str = ""

    @property
    def table_ids(self) -> tuple[str, ...]:
        """The ids with a table of their own: those of :attr:`env_ids` that are their env's newest version."""
        return tuple(i for i in self.env_ids if versions(i)[0] == i)

    def group_value(self, name: str, env_id: str, env_kwargs: Mapping[str, Any]) -> str:
        """A row's value of the ``group_by`` column ``name``: fixed per env id (``env_groups``) or an env kwarg (the
        family's default when the row does not set it; booleans shown as ``on`` / ``off``)."""
        if name in self.env_groups:
            return self.env_groups[name].get(env_id, "")
        value = env_kwargs.get(name, self.env_kwargs.get(name, ""))
        return ("on" if value else "off") if isinstance(value, bool) else str(value)

    def column(self, key: str) -> Column:
        """The column named ``key``."""
        for col in self.columns:
            if col.key == key:
                return col
        raise KeyError(f"{self.name} has no column {key!r}; columns: {[c.key for c in self.columns]}.")


def _every_version(*env_ids: str) -> tuple[str, ...]:
    """``env_ids`` (current versions), then every older registered version of each."""
    return (*env_ids, *(old for i in env_ids for old in versions(i) if old not in env_ids))


def _pass_columns(scale: float) -> tuple[Column, ...]:
    passes = [Column(f"pass^{k}", f"pass^{k}", "env/success", kind="pass_k", k=k, scale=scale) for k in range(1, 5)]
    return (*passes, Column("success", "success (mean ± sd over trials)", "env/success", scale=scale))


FAMILIES: dict[str, Family] = {
    "wiki_two_turn": Family(
        name="wiki_two_turn",
        title="WikiTwoTurn (MT-GRPO)",
        paper="000_… Table 2: mean reward components on the validation set",
        env_ids=_every_version("TurnRL/WikiTwoTurn-v2"),
        columns=(
            Column("tool_execution", "Tool Execution (0-0.2)", "reward/tool_execution"),
            Column("search_answer", "Search Answer (0-0.5)", "reward/search_answer"),
            Column("xml_format", "XML Format (0-0.2)", "reward/xml_format"),
            Column("exact_match", "Exact Match (0-1)", "reward/exact_match"),
        ),
        max_turns=2,
        max_new_tokens=128,
        env_kwargs=held_out_kwargs("TurnRL/WikiTwoTurn-v2"),
        notes="Reported rows: Qwen2.5-7B on TriviaQA with pyserini Wikipedia search, after 300 GRPO steps. Our rows: "
        "the offline `facts-v1` questions of the bundled ~10k-article corpus (BM25 top-1), validation split; "
        "`scripted:reference` answers whenever its verbatim search returns the answer (the task's search-answer "
        "oracle), `scripted:title` copies the first hit's title (EM 0.94 on v0's `lead-v0` questions). `smollm2+sft`: "
        "SmolLM2-135M-Instruct after the README main job's cold start (64 scripted demonstrations, 70% search + "
        "answer / 30% direct, 48 optimizer steps; `runs/readme/sft-policy`).",
    ),
    "search_r1": Family(
        name="search_r1",
        title="SearchR1 (MT-PPO)",
        paper="001_… Table 2: answer (exact match), format and retrieval correctness per dataset",
        env_ids=_every_version("TurnRL/SearchR1-v2"),
        columns=(
            Column("answer", "Answer Correctness (EM)", "env/answer_correct"),
            Column("format", "Format Correctness", "env/format_correct"),
            Column("retrieval", "Retrieval Correctness", "env/retrieval_correct"),
        ),
        max_turns=4,
        max_new_tokens=128,
        env_kwargs=held_out_kwargs("TurnRL/SearchR1-v2"),
        group_by=("dataset",),
        notes="Reported rows: Qwen2.5-7B, E5 retriever over the 2018 Wikipedia dump, 3 passages, 4 turns (the paper's "
        "Table 2 gives no retrieval row). Our rows: the offline `facts-v1` 1/2-hop questions (`dataset=wiki`, 25% "
        "two-hop) over BM25; `scripted:oracle` plays the questions' oracle queries. `smollm2+sft`:"
        " SmolLM2-135M-Instruct after `python -m trainers.sft --env TurnRL/SearchR1-v1` (256 oracle demonstrations, "
        "192 steps); it searches once on each of the 51 one-hop questions and twice on each of the 13 two-hop ones "
        "(EM 0.922 and 0.308 in the experiment runner's evaluation of the same weights, 0.797 in all: one question "
        "more than this row). With 64 demonstrations (the row until 2026-11-26: EM 0.609) it never hopped twice.",
    ),
    "sokoban": Family(
        name="sokoban",
        title="Sokoban (MT-PPO, App. E)",
        paper="001_… Table 5: success rate and effective action rate",
        env_ids=_every_version("TurnRL/Sokoban-v2"),
        columns=(
            Column("success", "Success Rate", "env/success"),
            Column("effective_action_rate", "Effective Action Rate", "env/effective_action_rate"),
        ),
        max_turns=3,
        max_new_tokens=128,
        env_kwargs=held_out_kwargs("TurnRL/Sokoban-v2"),
        notes="Reported rows: Qwen2.5-VL-3B at RL step 300, 6x6 rooms with one box, 3 turns of up to 3 actions. "
        "Ours: the same room setting (text observation). Effective action rate as Fig. 7 defines it from v1 on: a push "
        "that moves a box, and the steps of the shortest walk to the cell it was pushed from (see the env docstring); "
        "v0 counted every action that changed the state (the random policy: 0.611 on v0, 0.171 on v1). `smollm2+sft`: "
        "after `python -m trainers.sft --env TurnRL/Sokoban-v1` (512 BFS demonstrations x 3 epochs, 384 steps; 64 "
        "demonstrations, 48 steps: success 0.312), evaluated with `--seed 12345` (seed 0 draws the cold start's "
        "demonstration rooms; 16 of these 64 rooms are among the 512 demonstrations, and it solves 27 of the other "
        "48).",
    ),
    "tau": Family(
        name="tau",
        title="τ-bench (TARL)",
        paper="003_… Tables 1–2 (without the output check) and Tables 6–7 (with it): pass^1..pass^4 in %",
        env_ids=_every_version("TurnRL/TauRetail-v2", "TurnRL/TauAirline-v2"),
        columns=_pass_columns(100.0),
        trials=4,
        temperature=1.0,
        max_turns=30,
        max_new_tokens=256,
        env_kwargs=held_out_kwargs("TurnRL/TauRetail-v2"),
        group_by=("output_check",),
        notes="Reported rows: Qwen3-8B (and GPT-4.1, xLAM-2-8B) with an LLM user simulator, up to 30 turns, all 115 "
        "retail / 50 airline test tasks. Ours: the scripted user of `envs/tau` (it gives facts only when asked and "
        "confirms only the task's gold actions), tasks drawn from the test split. Both protocols are shown: "
        "`output_check` off is TARL's (the verifier compares the final database with the gold one), on adds "
        "τ-bench's check that every expected output was said (003 App. D). Without the output check a do-nothing "
        "agent passes every task whose gold actions write nothing: `scripted:no_tools` passes 35 % of the 20 "
        "airline test tasks (48 % of all 50), more than Qwen3-8B's reported 32 %, and 10 % of the 40 retail test "
        "tasks; with the check: 35 % (46 %) and 5 %. Read the airline rows against that floor.",
    ),
    "arithmetic": Family(
        name="arithmetic",
        title="Arithmetic (TARL's math tasks)",
        paper="no paper table: TARL mixes math problems into training only (003_… §3.1)",
        env_ids=_every_version("TurnRL/Arithmetic-v0"),
        columns=(Column("success", "Success", "env/success"),),
        max_turns=3,
        max_new_tokens=256,
        env_kwargs=held_out_kwargs("TurnRL/Arithmetic-v0"),
    ),
    "credit_chain": Family(
        name="credit_chain",
        title="CreditChain (turn-level credit diagnostic)",
        paper="no paper table: bsuite's umbrella_length experiment in text (a pick paid off after noisy turns)",
        env_ids=_every_version("TurnRL/CreditChain-v0"),
        columns=(
            Column("success", "Right pick", "env/success"),
            Column("choice_valid", "Valid pick", "env/choice_valid"),
        ),
        max_turns=100,
        max_new_tokens=32,
        env_kwargs=held_out_kwargs("TurnRL/CreditChain-v0"),
        notes="Held-out clue words (split test, 48 tasks). Scripted: oracle 1.0, random_choice and first_option 0.5.",
    ),
    "speech": Family(
        name="speech",
        title="τ-bench with a speaking user (TARL)",
        paper="003_… Table 3: pass^1..pass^4 in %, speech vs text evaluation",
        env_ids=_every_version("TurnRL/TauRetailSpeech-v2", "TurnRL/TauAirlineSpeech-v2"),
        columns=_pass_columns(100.0),
        trials=4,
        temperature=1.0,
        max_turns=30,
        max_new_tokens=256,
        env_kwargs=held_out_kwargs("TurnRL/TauRetailSpeech-v2"),
        group_by=("eval mode",),
        env_groups={
            "eval mode": {
                **dict.fromkeys(_every_version("TurnRL/TauRetailSpeech-v2", "TurnRL/TauAirlineSpeech-v2"), "speech"),
                **dict.fromkeys(_every_version("TurnRL/TauRetail-v2", "TurnRL/TauAirline-v2"), "text"),
            }
        },
        also_show={
            "TurnRL/TauRetailSpeech-v2": ("TurnRL/TauRetail-v2",),
            "TurnRL/TauAirlineSpeech-v2": ("TurnRL/TauAirline-v2",),
        },
        notes="Reported rows: Qwen2.5-Omni-7B on τ-bench retail (speech mode skips the authentication step), "
        "trained with speech-and-text (S & T) or text-only rollouts. Ours: the same policy on the speech env and on "
        "its text twin (rows of the text env's own table, repeated here as eval mode `text`).",
    ),
}


def family_for(env_id: str) -> Family:
    """The family whose ``env_ids`` hold ``env_id``; the error lists the ids that have a leaderboard."""
    for family in FAMILIES.values():
        if env_id in family.env_ids:
            return family
    known = sorted(i for f in FAMILIES.values() for i in f.env_ids)
    raise InvalidArgument(f"--env {env_id!r} has no leaderboard definition; ids with one: {known}.")


# ---------------------------------------------------------------------------------------------------- computing
@dataclass(frozen=True)
class EpisodeResult:
    """One evaluated episode: its task group, its trial index within the group, and its final episode metrics."""

    group: int
    trial: int
    metrics: Mapping[str, float]
    truncated: bool = False


@dataclass(frozen=True)
class MetricValue:
    """A column's value with its bootstrap CI over tasks; ``sd`` is the standard deviation over trials (trial j's
    mean over tasks, for j = 1..trials) when there are several trials."""

    estimate: float
    low: float
    high: float
    confidence: float
    n_tasks: int
    sd: float | None = None

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "n_tasks": self.n_tasks,
            "sd": self.sd,
        }


def _value(ep: EpisodeResult, source: str, kind: str) -> float:
    if source in ep.metrics:
        value = float(ep.metrics[source])
        if kind == "pass_k" and value not in (0.0, 1.0):
            raise InvalidArgument(f"pass^k needs a 0/1 {source!r}, episode of group {ep.group} has {value!r}.")
        return value
    if ep.truncated:  # cut by the evaluation's turn/context budget before the task could be scored: a failure
        return 0.0
    raise KeyError(f"a terminated episode (group {ep.group}) lacks the metric {source!r}; got {sorted(ep.metrics)}.")


def per_task(episodes: Sequence[EpisodeResult], source: str, trials: int, kind: str = "mean") -> np.ndarray:
    """A ``[tasks, trials]`` array of ``source`` (truncated episodes that lack it count 0)."""
    groups: dict[int, dict[int, float]] = {}
    for ep in episodes:
        groups.setdefault(ep.group, {})[ep.trial] = _value(ep, source, kind)
    bad = {g: sorted(t) for g, t in groups.items() if sorted(t) != list(range(trials))}
    if bad:
        some = dict(list(bad.items())[:3])
        raise InvalidArgument(f"every task needs trials 0..{trials - 1}; groups with others: {some}.")
    return np.array([[groups[g][t] for t in range(trials)] for g in sorted(groups)], dtype=float)


def compute_metrics(
    family: Family, episodes: Sequence[EpisodeResult], *, trials: int, seed: int = 0
) -> dict[str, MetricValue]:
    """Every column of ``family`` that ``trials`` supports (pass^k needs k <= trials), with CIs over tasks."""
    if not episodes:
        raise InvalidArgument("no episodes to score; run at least one episode (--episodes >= 1).")
    out: dict[str, MetricValue] = {}
    for col in family.columns:
        if col.kind == "pass_k" and col.k > trials:
            continue
        table = per_task(episodes, col.source, trials, col.kind)
        if col.kind == "pass_k":
            ci = pass_hat_k_ci([int(c) for c in table.sum(axis=1)], trials, col.k, confidence=CONFIDENCE,
                               n_boot=BOOTSTRAP_SAMPLES, seed=seed)  # fmt: skip
        else:
            ci = bootstrap_ci(table.mean(axis=1), confidence=CONFIDENCE, n_boot=BOOTSTRAP_SAMPLES, seed=seed)
        sd = float(table.mean(axis=0).std(ddof=1)) if trials > 1 and col.kind == "mean" else None
        out[col.key] = MetricValue(ci.estimate, ci.low, ci.high, ci.confidence, int(table.shape[0]), sd)
    return out
