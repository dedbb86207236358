"""Cold start: supervised fine-tuning on scripted-policy trajectories, with the same tokenisation and masks as RL.

    python -m trainers.sft --env TurnRL/WikiTwoTurn-v2                       # the family's robust cold start
    python -m trainers.sft --env TurnRL/WikiTwoTurn-v2 --warm-start weakened # the papers' comparisons' imperfect one

A small model that never writes a tool call gets zero turn-level advantage everywhere, so RL alone cannot
discover the tool. The env's scripted policies play ``episodes`` tasks through the same rollout code RL uses
(token-in-token-out, chat-template deltas, ``loss_mask`` = the policy's turns); the loss is the negative
log-likelihood of the policy tokens (per-sequence token mean). Each env family's default imitates its oracle-like
policy alone, which gives the same greedy behaviour from every seed (``--warm-start default``); the papers'
comparisons start from a deliberately imperfect mixture instead (``--warm-start weakened``, :data:`WEAKENED`), so RL
has two behaviours to choose between. After training, the model
plays ``eval_tasks`` held-out tasks greedily (the env's validation split, the leaderboard's task draw); the tool-use
rate (``env/tool_called``), exact match (``env/exact_match``) and their 95% CI half-widths (``eval_ci95/...``) are
printed and written to ``OUT/eval.json``. Start RL from it with ``--init OUT``; or fold this step into an RL run
with ``--sft-episodes N``.

The defaults make 48 optimizer steps (64 demonstrations x 3 epochs / 4 per step). With v0's defaults (48 x 1 / 8 = 6
steps) the NLL fell to a few hundredths, yet greedy SmolLM2 called the tool again in turn 2: the token that decides
between searching and answering is one of ~80 policy tokens of an episode, so a small mean NLL hid a near coin flip
there. Measured on WikiTwoTurn-v1 (64 x 3 / 4, bf16, one run): NLL 1.52 -> 0.023, then greedy on 48 fresh tasks:
tool called 0.92, answered 0.98, EM 0.50 (the search-answer oracle ``scripted:reference``: EM 0.73).

**WikiTwoTurn**: ``scripted:reference`` alone (was 70% reference / 30% direct until 2026-11-24). Cause of the luck
the mixture left (issue 26: the same command gave greedy tool use in turn 1 on 17%, 19% and 28% of 64 held-out
tasks, EM 0.09-0.23, from run to run): the per-sequence token mean weighs each token 1/n in an episode of n policy
tokens, and a direct episode has 26 policy tokens against 109 for a searching one, so the direct choice carried
69-71% of the loss weight of the token that decides between searching and answering in the 64 demonstrations of
seeds 0, 1 and 2 (63-66% of them searched): greedy decoding then picks either side by a small margin that the
rest of the run decides. With the reference policy alone that token has one answer. Measured (64 x 3 / 4, bf16,
greedy on the 64 held-out tasks of ``leaderboards.evaluate --seed 12345``, vLLM): tool in turn 1 on 64/64 for
each of SFT seeds 0, 1, 2; EM 0.406 [0.281, 0.531], 0.438 [0.312, 0.562], 0.453 [0.328, 0.562]. Seed 0 rebuilt
on another machine of the same kind: EM 0.391 [0.281, 0.500] (one task fewer; threaded bf16 training on the CPU
is not bit-identical across machines), the committed ``smollm2+sft`` row, whose ``commands`` replay it (replayed:
0.391 again); seeds 1 and 2 there (``experiments/wiki_recipe_sweep.toml``'s check seeds): 0.469, 0.453, 64/64.

**WikiTwoTurn-v2**: ``scripted:explore`` (:data:`FAMILY_DEFAULTS`; v0 and v1 keep ``scripted:reference``,
:data:`VERSION_DEFAULTS`, and ``--warm-start verbatim`` names it for v2). The reference policy searches the question
verbatim, so every committed run's model did so on 64/64 held-out tasks and turn-1 rewards varied inside 6 of 131
RL groups. ``explore`` draws its query (verbatim, main entity, keywords, paraphrase, some keywords, a wrong entity
from the corpus titles: :mod:`agentgym_turn.queries`) and answers as ``reference``. Over the 4,421 training
questions, 4 demonstrations each (bundled Lucene BM25, top 1): turn-1 ``search_answer`` varies inside 39.6% of the
groups, every turn is well formed, search-answer rate 0.633 and EM 0.624 (reference: 0.760 and 0.753, varying in 0%).

Other env families change some defaults (:data:`FAMILY_DEFAULTS`; a flag given wins).

**CreditChain**: ``scripted:random_choice`` alone, unlike the oracle-like starts below: the env is a credit
diagnostic, so the cold start teaches the tags and the turn structure but not which option fits a clue. Its turn-1
picks are uniform (right half the time, either option), and RL must then find the mapping from the outcome alone.
Uniform in the demonstrations, not always in the model: with a constant learning rate and about one demonstration of
a pair per step, the last steps' picks move the pair's prior, and a seed can end leaning to one option (the horizon-4
grid's seed 2 picked `boat` 91% of the time; experiments/runs/credit_chain_map_epoch/NOTES.md). ``--warm-start
balanced`` narrows that drift: every task is demonstrated twice, once with each option (``first_option`` and
``second_option`` cycled over a group of 2), and both demonstrations share an optimizer step (``--group-size 2``), so
no step's demonstrations favour an option. Over seeds 0-2 at horizon 4 the sampled held-out picks of `boat` went from
0.48 / 0.29 / 0.91 to 0.45 / 0.79 / 0.52 (experiments/runs/credit_chain_map_balanced/NOTES.md): narrower, not gone.

**SearchR1**: ``scripted:oracle`` alone (was 70% oracle / 30% direct). Every facts-v1 question needs a search
(answered from the question alone: EM 0.07), so a direct demonstration teaches the wrong first move, and it weighs
more than its share: under the per-sequence token mean, the token that decides between searching and answering
(``<think> I need ...`` / ``<think> I can ...``) weighs 1/n in an episode of n policy tokens, 23 for a direct
episode against 55 for a searching one. In the 64 demonstrations of seed 0 (62.5% searching by the draw) the direct
choice carried 58% of that token's loss weight; greedy SmolLM2 then searched 0.34 times per episode, EM 0.25.
``max_context`` 4096 leaves room for three searches of up to 500 tokens of passages each.

**256 demonstrations** (was 64 until 2026-11-26; 256 x 3 / 4 = 192 steps). With 64, turn 2's decision (answer, or
search again for the second hop) rested on the run, not the question. Greedy on the 64 test questions of
``leaderboards.evaluate --seed 0`` (vLLM; 13 of them two-hop), SFT seeds 0 and 1 both answered after one search on
every question (EM 0.594 [0.469, 0.703] and 0.594 [0.484, 0.704], 0 of 13 two-hop right: the committed row of
2026-11-23, 0.609 [0.500, 0.719], is the same policy), seed 2 searched again on 33 of 51 one-hop questions and never
answered 12 of the 13 two-hop ones (EM 0.297 [0.188, 0.406], format 0.75). Not the draw: seed 2's 64 demonstrations
held the fewest two-hop ones (9; seeds 0 and 1: 14 and 10). The two-hop questions say so in their wording (*the
capital of the country mentioned in the Wikipedia lead of A*), but 9-14 examples do not teach that cue, so the
search-again token's probability stays near the middle and the run's last batches settle it (seed 2's last two
losses 0.031 and 0.034, eight times the median of its last 16, 0.004). 256 demonstrations hold 46-52 two-hop ones;
then the decision follows the question: seed 2 (alone on 2 cores: SFT 28 min, NLL 2.12 -> 0.000) searched once on
all 51 one-hop questions (EM 0.922) and twice on 12 of the 13 two-hop ones (EM 0.462): EM 0.828 [0.734, 0.906],
format 1.0, retrieval 0.922 (the spec's check seed 2 rebuilt it: the same EM and searches, retrieval 0.906, SFT 32
min). Seeds 0 and 1 (``experiments/searchr1_recipe.toml``'s warm start and check seed): EM
0.797 [0.703, 0.891] and 0.781 [0.672, 0.875], one-hop 0.922 and two-hop 0.308 and 0.231 each, the second search
made on 13 and 13 of 13 (seed 1: a third on 2); SFT 31 and 43 min on a busy machine. As on Sokoban, what teaches a
decision is more examples of it, not more passes.

**Sokoban**: ``scripted:bfs`` alone (was 70% BFS / 30% random), on 512 rooms (was 64). The same weighting, per
turn: a random episode opens each of its 3 turns with ``<think>Random moves.`` and has fewer policy tokens (55
against 74; BFS episodes end early), so in the 64 demonstrations of seed 0 (37.5% random by the draw) ``Random``
carried 52% of the loss weight of the token that opens a turn; greedy SmolLM2 then played about as the random policy
does (success 0.047, effective action rate 0.145; random: 0.008, 0.171). All measurements below: greedy on the 64
held-out rooms of ``leaderboards.evaluate --seed 12345`` (this module's own evaluation draws the same rooms; seed 0
would draw the demonstration rooms), vLLM, one run each; "unseen" counts the rooms that are not also among the
demonstrations (the generator repeats rooms: 418 distinct in 512 draws).

* **512 demonstrations x 3 epochs / 4 per step = 384 steps** (the default): NLL 1.151 -> 0.023, 88 min on one
  thread beside a training run (~12 s a step; 2 threads on an idle machine are faster); success **0.562 [0.438,
  0.688]** (27 of the 48 unseen rooms, 9 of the 16 seen), effective action rate 0.885 [0.833, 0.930]: half the BFS
  oracle's 1.0. Its first action lies on a shortest solution in 63 of 64 rooms and a whole turn in 74% of turns;
  16 turns push the box into a dead end.
* 64 demonstrations x 3 epochs (48 steps, the default until 2026-11-23): NLL 1.445 -> 0.100; success 0.312 [0.203,
  0.422] (18 of 60 unseen), effective action rate 0.672 [0.581, 0.758]; every turn well formed and every action
  name valid, but its plans were often the demonstrations' common shapes: first action on a shortest solution in
  75% of rooms (random 23%), a whole turn in 40% of turns (random 11%), 23 dead-end pushes.
* Not taken, each against the 64 x 3 run: 2 episodes per step (96 steps, same tokens) 0.359 [0.250, 0.484]; 192
  demonstrations x 1 epoch (48 steps) 0.156 (8 of 55 unseen): more rooms need more steps, one pass over them is not
  enough; a ``<think>`` that first locates the player, box and target (``Player at row 3, column 3. Box at ...``)
  0.266 [0.156, 0.375], its locations right in 2 of 64 first turns: SmolLM2's tokenizer merges ``__`` and ``####``
  runs, so a column is not a token position and 64 rooms do not teach counting it; one token per cell (cells
  separated by spaces, tried on a scratch copy of the env) 0.062 [0.016, 0.125], one memorised opening whatever
  the room. What taught planning was rooms and steps: 8x the rooms and 8x the steps of the 64 x 3 run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_turn.error import InvalidArgument
from agentgym_turn.logs import quiet_logs
from trainers.config import ENV_KWARG_HELP, arg, env_kwargs_by_id, parse_config, to_dict
from trainers.device import DEVICE_HELP, check_device_spec
from trainers.rollout import ASSIGNS

#: Defaults per env family (the id's name without ``TurnRL/`` and ``-vN``) over :class:`SFTConfig`'s own, which are
#: WikiTwoTurn's. They apply when every ``--env`` id belongs to the family; a flag given on the command line wins.
#: Why each differs is in the module docstring.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "WikiTwoTurn": {"policy": "scripted:explore"},
    "SearchR1": {"policy": "scripted:oracle", "max_context": 4096, "episodes": 256},
    "Sokoban": {"policy": "scripted:bfs", "episodes": 512},
    "CreditChain": {"policy": "scripted:random_choice"},
}

#: ``--warm-start weakened``: the deliberately imperfect cold starts of the papers' comparisons, per env family, over
#: the family's defaults (a flag given still wins). They leave RL both behaviours to choose between: WikiTwoTurn
#: 30% tool use, the papers' base-model rate (EM 0.11 greedy, ``experiments/wiki_mtgrpo.toml``); Sokoban 64 BFS
#: rooms (success 0.31, ``experiments/sokoban_mtppo_bfs64.toml``); SearchR1 the 70% oracle / 30% direct mixture of 64
#: demonstrations that was its default before 2026-11-23.
WEAKENED: dict[str, dict[str, Any]] = {
    "WikiTwoTurn": {"policy": "scripted:reference=0.3,scripted:direct=0.7", "episodes": 64, "epochs": 2},
    "Sokoban": {"episodes": 64},
    "SearchR1": {"policy": "scripted:oracle=0.7,scripted:direct=0.3", "episodes": 64},
}
#: ``--warm-start verbatim``: the cold start that always searches the question verbatim (WikiTwoTurn's default up to
#: v1, kept by name: it teaches one first turn, so turn-1 rewards rarely vary inside an RL group).
VERBATIM: dict[str, dict[str, Any]] = {"WikiTwoTurn": {"policy": "scripted:reference"}}
#: ``--warm-start balanced``: every demonstrated task once with each first move, both in the same optimizer step, so
#: no update leans the cold start to one of them (CreditChain: each option once per task; the module docstring says
#: why the default, random picks, can end leaning).
BALANCED: dict[str, dict[str, Any]] = {
    "CreditChain": {"policy": "scripted:first_option,scripted:second_option", "group_size": 2, "assign": "cycle"}
}
#: Defaults of older env versions that differ from their family's, so a committed command replays as it ran.
VERSION_DEFAULTS: dict[str, dict[str, Any]] = {"WikiTwoTurn-v0": {}, "WikiTwoTurn-v1": {}}
WARM_STARTS: tuple[str, ...] = ("default", "weakened", "verbatim", "balanced")
#: ``--lr-schedule`` values (:func:`scheduled_lr`).
LR_SCHEDULES: tuple[str, ...] = ("constant", "linear")


def env_family(env_ids: Sequence[str]) -> str | None:
    """The one env family of ``env_ids`` (the id's name without ``TurnRL/`` and ``-vN``), or ``None`` when mixed."""
    families = {env_id.rpartition("/")[2].rsplit("-v", 1)[0] for env_id in env_ids}
    return families.pop() if len(families) == 1 else None


def family_defaults(env_ids: Sequence[str], warm_start: str = "default") -> dict[str, Any]:
    """The :data:`FAMILY_DEFAULTS` of ``env_ids`` when they all belong to one family, else ``{}`` (SFTConfig's);
    ``warm_start="weakened"`` (``"verbatim"``, ``"balanced"``) adds the family's :data:`WEAKENED` (:data:`VERBATIM`,
    :data:`BALANCED`) cold start over them. Ids of one older version listed in :data:`VERSION_DEFAULTS` take those
    instead of the family's.

    ``family_defaults(["TurnRL/Sokoban-v2"])`` -> ``{"policy": "scripted:bfs", "episodes": 512}``.
    """
    if warm_start not in WARM_STARTS:
        raise InvalidArgument(f"--warm-start {warm_start!r} is not a named cold start; use one of {WARM_STARTS}.")
    family = env_family(env_ids)
    out = dict(FAMILY_DEFAULTS.get(family, {})) if family else {}
    versioned = {env_id.rpartition("/")[2] for env_id in env_ids}
    if len(versioned) == 1 and (name := versioned.pop()) in VERSION_DEFAULTS:
        out = dict(VERSION_DEFAULTS[name])
    presets = {"weakened": WEAKENED, "verbatim": VERBATIM, "balanced": BALANCED}
    if warm_start in presets:
        preset = presets[warm_start]
        if family not in preset:
            raise InvalidArgument(
                f"--warm-start {warm_start} is defined for {sorted(preset)} (one family at a time), not "
                f"{list(env_ids)}; give the mixture with --policy instead."
            )
        out.update(preset[family])
    return out


def parse_policy_mix(spec: str) -> tuple[list[str], list[float]]:
    """``"scripted:reference=0.7,scripted:direct=0.3"`` -> (["reference", "direct"], [0.7, 0.3]); weight 1 if
    omitted."""
    names, weights = [], []
    for part in spec.split(","):
        part = part.strip()
        if not part.startswith("scripted:"):
            raise InvalidArgument(
                f"--policy entry {part!r} must look like scripted:NAME or scripted:NAME=WEIGHT, e.g. "
                "scripted:reference=0.7,scripted:direct=0.3."
            )
        name, _, weight = part.removeprefix("scripted:").partition("=")
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise InvalidArgument(f"--policy weight {weight!r} of {name!r} is not a number.") from None
        if not name or w < 0:
            raise InvalidArgument(f"--policy entry {part!r} needs a policy name and a weight >= 0.")
        names.append(name)
        weights.append(w)
    if sum(weights) <= 0:
        raise InvalidArgument(f"--policy {spec!r}: the weights sum to 0; give at least one a positive weight.")
    return names, weights


def check_policy_mix(env_ids: Sequence[str], spec: str, flag: str, skip: str) -> None:
    """Every env of ``env_ids`` has each scripted policy of the mixture ``spec`` (a cold start fails here, before a
    model loads, not at its first episode; ``trainers.rl``'s folded-in cold start). ``flag`` and ``skip``: the CLI's
    way to pick policies and to go without.
    An env registered with a factory function instead of a class is checked when it plays."""
    from agentgym_turn.registration import env_class

    names, _ = parse_policy_mix(spec)
    for env_id in env_ids:
        cls = env_class(env_id)
        if not isinstance(cls, type):
            continue
        have = getattr(cls, "scripted_policies", None) or {}
        missing = [name for name in names if name not in have]
        if missing:
            raise InvalidArgument(
                f"the cold start imitates scripted:{missing[0]} on {env_id}, but {cls.__name__} has no scripted policy "
                f"{missing[0]!r} (it has {sorted(have) or 'none'}). Give the env class scripted_policies = "
                f"{{{missing[0]!r}: policy}} (a function (env, rng) -> the turn's text; agentgym_turn.policies), pick "
                f"its policies with {flag} scripted:NAME, or go without a cold start: {skip}."
            )


@dataclass
class SFTConfig:
    """Every knob of a cold-start run."""

    env: list[str] = arg(["TurnRL/WikiTwoTurn-v2"], "env ids whose scripted policies play")  # noqa: RUF009
    env_weights: list[float] | None = arg(None, "sampling weight per --env id")  # noqa: RUF009
    env_kwarg: list[str] = arg([], ENV_KWARG_HELP)  # noqa: RUF009
    policy: str = arg(
        "scripted:reference",
        "scripted:NAME[=WEIGHT],... mixture to imitate (SearchR1: scripted:oracle, Sokoban: scripted:bfs)",
    )
    warm_start: str = arg(
        "default",
        "named cold start: default (the family's, robust across seeds), verbatim (WikiTwoTurn: search the question "
        "verbatim, the default up to v1), weakened (the papers' comparisons' "
        "deliberately imperfect one, e.g. WikiTwoTurn 30%% tool use) or balanced (CreditChain: each task shown with "
        "both options in one step); flags given win",
        choices=WARM_STARTS,
    )
    model: str = arg("smollm2", "model to fine-tune: 'smollm2', a Hugging Face id or a folder")
    init: str | None = arg(None, "checkpoint or HF folder to start from instead of --model")
    episodes: int = arg(64, "demonstration episodes (--group-size per task; SearchR1: 256, Sokoban: 512)")
    group_size: int = arg(
        1, "demonstration episodes per task, kept in one optimizer step (--episodes and --batch-episodes: multiples)"
    )
    assign: str = arg(
        "draw",
        "how an episode gets its --policy: draw (by weight) or cycle (episode j of a task's group plays the j-th "
        "policy listed, weights unused)",
        choices=ASSIGNS,
    )
    epochs: int = arg(3, "passes over the demonstrations")
    batch_episodes: int = arg(4, "episodes per optimizer step (64 x 3 / 4 = 48 steps; 6 steps did not teach turn 2)")
    lr: float = arg(1e-4, "learning rate (AdamW; its first step's under --lr-schedule linear)")
    lr_schedule: str = arg(
        "constant", "constant, or linear: decays to lr / steps at the last step", choices=LR_SCHEDULES
    )
    pack_tokens: int = arg(512, "with --no-share-prefix: tokens per packed row (no padding)")
    share_prefix: bool = arg(True, "compute the prompt tokens a pack's demonstrations share (the system prompt) once")
    share_pack_tokens: int = arg(2048, "with --share-prefix: tokens one pack computes (shared prefix once + the rests)")
    max_new_tokens: int = arg(256, "a scripted turn longer than this is cut (as the RL budget would)")
    max_context: int = arg(2048, "max tokens of an episode")
    max_turns: int = arg(30, "max policy turns of an episode (30, TARL's budget, is at or above every env's own)")
    eval_tasks: int = arg(64, "held-out tasks played greedily by the fine-tuned model afterwards (0 = none)")
    eval_max_new_tokens: int = arg(96, "generated tokens per turn in the evaluation")
    bf16: bool | None = arg(
        None,
        "bf16 autocast (default: on where the device computes bf16 natively, agentgym_turn.hardware.native_bf16; "
        "--no-bf16: fp32)",
    )
    threads: int = arg(0, "torch threads (0 = torch's default)")
    device: str = arg("auto", DEVICE_HELP)
    verbose: bool = arg(False, "vLLM's, transformers' and Java's INFO logs too (default: warnings and errors)")
    seed: int = arg(0, "seed of tasks, policy choice and shuffling")
    out_dir: str = arg("runs/sft", "output folder: policy/ (HF folder for --init), metrics.jsonl, eval.json")
    log: str = arg(
        "jsonl",
        "metric loggers, comma-separated: jsonl (OUT/metrics.jsonl, always on), tensorboard (OUT/tensorboard), wandb "
        "(OUT/wandb, offline unless WANDB_MODE says otherwise); trainers.loggers",
    )

    def __post_init__(self) -> None:
        n_policies = len(parse_policy_mix(self.policy)[0])  # the syntax, checked first
        if self.warm_start not in WARM_STARTS:  # the CLI applies the named presets (parse_sft_config)
            raise InvalidArgument(
                f"--warm-start {self.warm_start!r} is not a named cold start; use one of {WARM_STARTS}."
            )
        env_kwargs_by_id(self.env, self.env_kwarg)  # the syntax, checked before anything runs
        for name in ("episodes", "epochs", "batch_episodes", "max_new_tokens", "eval_max_new_tokens", "pack_tokens",
                     "share_pack_tokens", "group_size"):  # fmt: skip
            if getattr(self, name) < 1:
                raise InvalidArgument(f"--{name.replace('_', '-')}={getattr(self, name)} must be >= 1.")
        for name in ("episodes", "batch_episodes"):
            if getattr(self, name) % self.group_size:
                raise InvalidArgument(
                    f"--{name.replace('_', '-')}={getattr(self, name)} is not a multiple of --group-size="
                    f"{self.group_size}: an optimizer step keeps a task's episodes together."
                )
        if self.assign not in ASSIGNS:
            raise InvalidArgument(f"--assign {self.assign!r} is not one of {ASSIGNS}.")
        if self.assign == "cycle" and self.group_size % n_policies:
            raise InvalidArgument(
                f"--assign cycle plays each of the {n_policies} policies of --policy {self.policy!r} once per group, "
                f"so --group-size={self.group_size} must be a multiple of that."
            )
        if self.lr <= 0:
            raise InvalidArgument(f"--lr={self.lr} must be > 0.")
        if self.lr_schedule not in LR_SCHEDULES:
            raise InvalidArgument(f"--lr-schedule {self.lr_schedule!r} is not one of {LR_SCHEDULES}.")
        if self.eval_tasks < 0:
            raise InvalidArgument(f"--eval-tasks={self.eval_tasks} must be >= 0.")
        check_device_spec(self.device)
        from trainers.loggers import check_log_spec

        check_log_spec(self.log)  # an unknown logger or a missing package fails before the run


def parse_sft_config(argv: Sequence[str] | None) -> SFTConfig:
    """The CLI's config: ``--env`` is read first, then every flag not given takes its family's default
    (:func:`family_defaults`) or SFTConfig's."""
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--env", nargs="+", default=SFTConfig().env)
    peek.add_argument("--warm-start", default="default")
    known = peek.parse_known_args(argv)[0]
    return parse_config(SFTConfig, argv, prog="python -m trainers.sft", description=__doc__.split("\n\n")[0],
                        defaults=family_defaults(known.env, known.warm_start))  # fmt: skip


def demonstrations(
    pool: Any,
    tokenizer: Any,
    policy_mix: str,
    episodes: int,
    seed: int,
    rcfg: Any,
    *,
    group_size: int = 1,
    assign: str = "draw",
) -> list[Any]:
    """``episodes`` scripted episodes, ``group_size`` per task (consecutive, as RL's groups), each played by a policy
    of the mixture: drawn by weight (``assign="draw"``) or member j of a group the j-th (``"cycle"``,
    :func:`trainers.rollout.scripted_actor`)."""
    from trainers.engines import stop_token_ids
    from trainers.rollout import collect, scripted_actor

    if episodes % group_size:
        raise InvalidArgument(f"episodes={episodes} is not a multiple of group_size={group_size}.")
    names, weights = parse_policy_mix(policy_mix)
    stop = stop_token_ids(tokenizer)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else stop[0]
    eps, _ = collect(pool, scripted_actor(tokenizer, eos, names, weights, assign), tokenizer, stop, rcfg,
                     num_tasks=episodes // group_size, group_size=group_size, seed=seed)  # fmt: skip
    return eps


def sft_batches(n: int, batch_episodes: int, epochs: int, seed: int, group_size: int = 1) -> list[np.ndarray]:
    """The episode indices of every optimizer step: each epoch a fresh permutation of the ``n // group_size``
    groups of consecutive episodes (``group_size`` 1: of the episodes), cut into batches of ``batch_episodes``, so
    a task's group always shares an update. ``n`` and ``batch_episodes`` are multiples of ``group_size``."""
    if n % group_size or batch_episodes % group_size:
        raise InvalidArgument(
            f"{n} episodes in batches of {batch_episodes} cannot keep groups of {group_size} together; make both "
            f"multiples of {group_size}."
        )
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(epochs):
        groups = rng.permutation(n // group_size)
        order = (groups[:, None] * group_size + np.arange(group_size)[None, :]).reshape(-1)
        batches += [order[i : i + batch_episodes] for i in range(0, n, batch_episodes)]
    return batches


def scheduled_lr(lr: float, schedule: str, step: int, steps: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``steps``: ``constant`` ``lr`` throughout;
    ``linear`` from ``lr`` at the first step down to ``lr / steps`` at the last (0 after it), as Hugging Face's
    linear schedule without warm-up, so the last steps' demonstrations move the model least."""
    if schedule not in LR_SCHEDULES:
        raise InvalidArgument(f"lr_schedule={schedule!r} is not one of {LR_SCHEDULES}.")
    return lr if schedule == "constant" else lr * (steps - step) / steps


def sft_train(
    policy: Any,
    episodes: Sequence[Any],
    *,
    epochs: int,
    batch_episodes: int,
    lr: float,
    pack_tokens: int,
    bf16: bool,
    seed: int,
    log: Any = None,
    share_pack_tokens: int | None = None,
    group_size: int = 1,
    lr_schedule: str = "constant",
) -> list[float]:
    """Minimise the NLL of the policy tokens (per-sequence token mean); returns the loss of every optimizer step.
    ``share_pack_tokens``: packs share their demonstrations' common prompt (``modeling.pack_shared``, the same loss
    and gradients computed on fewer tokens); ``None``: rows of whole episodes of ``pack_tokens``. Batches go to the
    policy's device; each keeps groups of ``group_size`` consecutive episodes together (:func:`sft_batches`).
    ``lr_schedule``: the learning rate of each step (:func:`scheduled_lr`)."""
    import torch
    from tqdm import tqdm

    from trainers import modeling as M
    from trainers.losses import aggregate, aggregate_denominator

    params = [p for p in policy.parameters() if p.requires_grad]
    device = params[0].device
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=True)  # one kernel (CPU too), not a loop
    masks = [ep.loss_mask.astype(np.float32) for ep in episodes]
    losses: list[float] = []
    policy.train()
    batches = sft_batches(len(episodes), batch_episodes, epochs, seed, group_size)
    scheduled_lr(lr, lr_schedule, 0, len(batches))  # an unknown schedule fails before the first step's compute
    for b, batch in enumerate(tqdm(batches, desc="sft", file=sys.stderr)):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total, tokens = 0.0, 0
        den = aggregate_denominator([masks[i] for i in batch], "seq_mean_token_mean")  # the batch's mean, any packing
        if share_pack_tokens is None:
            packs = M.pack_episodes(episodes, batch.tolist(), pack_tokens, device=device)
        else:
            packs = M.pack_shared(episodes, batch.tolist(), share_pack_tokens, device=device)
        for pack in packs:
            mask = pack.gather(masks)
            with M.autocast(bf16, device):
                lp = M.pack_logprobs(policy, pack, positions=mask).logprobs
            loss = -aggregate(lp, mask, pack.seq_ids, denominator=den)
            loss.backward()
            total += float(loss.detach())
            tokens += pack.num_tokens
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        step_lr = scheduled_lr(lr, lr_schedule, b, len(batches))
        for group in opt.param_groups:
            group["lr"] = step_lr
        opt.step()
        losses.append(total)
        if log is not None:
            log({"step": b + 1, "losses/sft": total, "perf/train_tokens_per_s": tokens / (time.perf_counter() - t0),
                 "perf/lr": step_lr})  # fmt: skip
    return losses


def evaluate(policy: Any, tokenizer: Any, cfg: SFTConfig) -> dict:
    """Greedy episodes of the fine-tuned policy on ``cfg.eval_tasks`` held-out tasks per env (the transformers
    engine; :mod:`trainers.evaluation`: the env's held-out split, e.g. WikiTwoTurn's validation questions, and the
    task draw of ``leaderboards.evaluate`` at its default seed). ``--env-kwarg`` items apply, except ``split``."""
    from trainers.engines import make_engine
    from trainers.evaluation import HeldOut, evaluate_policy

    engine = make_engine("transformers", model=policy, tokenizer=tokenizer, autocast_bf16=cfg.bf16)
    kwargs = env_kwargs_by_id(cfg.env, cfg.env_kwarg)
    out: dict[str, float] = {}
    for env_id in cfg.env:
        held_out = HeldOut((env_id,), tasks=cfg.eval_tasks, env_kwargs={k: v for k, v in kwargs[env_id].items()
                           if k != "split"}, max_new_tokens=cfg.eval_max_new_tokens, max_turns=cfg.max_turns,
                           max_context=cfg.max_context)  # fmt: skip
        name = "" if len(cfg.env) == 1 else env_id.rsplit("/", 1)[-1] + "/"
        for key, value in evaluate_policy(engine, tokenizer, held_out).items():
            out[key.replace("eval/", name, 1) if key.startswith("eval/") else key] = value
    return out


def main(argv: list[str] | None = None) -> dict:

    from agentgym_turn.models import load_causal_lm
    from trainers.checkpoint import policy_folder
    from trainers.device import place_model, resolve_device, resolve_precision, set_threads
    from trainers.loggers import make_loggers
    from trainers.modeling import save_policy, seed_everything
    from trainers.provenance import record_command
    from trainers.ray_rollout import make_env_pool
    from trainers.rollout import RolloutConfig

    cfg = parse_sft_config(argv)
    quiet_logs(cfg.verbose)
    t0 = time.perf_counter()
    seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    set_threads(device, cfg.threads)
    cfg = dataclasses.replace(cfg, bf16=resolve_precision("float32", cfg.bf16, device)[1])  # config.json: what ran
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))
    typed = sys.argv[1:] if argv is None else argv
    record_command(out, "python -m trainers.sft", typed, inputs=[cfg.init or cfg.model])  # trainers.provenance
    (out / "metrics.jsonl").unlink(missing_ok=True)
    loggers = make_loggers(cfg.log, out, config=to_dict(cfg))  # metrics.jsonl and the --log loggers
    policy, tok = load_causal_lm(policy_folder(cfg.init) if cfg.init else cfg.model)
    place_model(policy, device)
    pool = make_env_pool(cfg.env, cfg.env_weights, env_kwargs_by_id(cfg.env, cfg.env_kwarg))
    demo_cfg = RolloutConfig(max_new_tokens=cfg.max_new_tokens, max_context=cfg.max_context, max_turns=cfg.max_turns)
    eps = demonstrations(pool, tok, cfg.policy, cfg.episodes, cfg.seed, demo_cfg, group_size=cfg.group_size,
                         assign=cfg.assign)  # fmt: skip
    n_tok = sum(int(e.loss_mask.sum()) for e in eps)
    print(f"[sft] {len(eps)} demonstrations ({n_tok} policy tokens, mean return "
          f"{np.mean([e.total_reward for e in eps]):.2f}) from {cfg.policy} on {cfg.env}", flush=True)  # fmt: skip
    losses = sft_train(policy, eps, epochs=cfg.epochs, batch_episodes=cfg.batch_episodes, lr=cfg.lr,
                       pack_tokens=cfg.pack_tokens, bf16=cfg.bf16, seed=cfg.seed,
                       share_pack_tokens=cfg.share_pack_tokens if cfg.share_prefix else None,
                       group_size=cfg.group_size, lr_schedule=cfg.lr_schedule,
                       log=lambda row: loggers.log(row["step"], row))  # fmt: skip
    save_policy(policy, tok, str(out / "policy"))
    print(f"[sft] NLL {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps; saved {out / 'policy'}")
    result: dict = {"sft/first_loss": losses[0], "sft/last_loss": losses[-1]}
    if cfg.eval_tasks:
        result.update(evaluate(policy, tok, cfg))
        (out / "eval.json").write_text(json.dumps(result, indent=2, sort_keys=True))
        # The held-out numbers go to every --log logger too, as eval/... at the last step (trainers.rl's naming).
        loggers.log(len(losses), {f"eval/{k}": v for k, v in result.items() if not k.startswith("sft/")})
        shown = ("env/tool_called", "env/exact_match", "rollout/format_rate", "env/return")
        summary = {k: round(result[k], 3) for k in shown if k in result}
        print(f"[sft] greedy on {cfg.eval_tasks} held-out tasks:", summary)
    loggers.close()
    print(f"[sft] done in {time.perf_counter() - t0:.0f} s")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
