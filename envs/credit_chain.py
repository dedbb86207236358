"""TurnRL/CreditChain-v0: a turn-level credit diagnostic in text, after bsuite's umbrella_length experiment.

Turn 1 shows a clue and asks for one of two options; the pick decides the reward paid ``horizon - 1`` turns later.
The turns in between are distractors: a short request whose reward is random noise, whatever the agent answers.
A worked episode (``horizon=3``, ``noise=0.5``, turn 1 revealed)::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/CreditChain-v0", horizon=3, noise=0.5, reveal=True)
    >>> task = {"frame": "Forecast", "cue": "drizzle", "options": ["sunglasses", "umbrella"], "answer": "umbrella"}
    >>> messages, info = env.reset(seed=0, options={"task": task})
    >>> messages[1]["content"]
    'Turn 1/3. Forecast: drizzle. Take sunglasses or umbrella?'
    >>> messages, reward, terminated, _, info = env.step("<choice>umbrella</choice>")
    >>> reward, info["reward_components"], messages[0]["content"]
    (1.0, {'choice': 1.0}, 'Turn 2/3. Say yes or no.')
    >>> _, reward, terminated, _, info = env.step("<answer>yes</answer>")
    >>> abs(reward), list(info["reward_components"])        # +0.5 or -0.5, drawn at reset
    (0.5, ['distractor'])
    >>> _, reward, terminated, _, info = env.step("<answer>done</answer>")
    >>> reward, terminated, info["episode_metrics"]["env/success"]
    (1.0, True, 1.0)

Named regimes (``PRESETS``) set where the credit lies; under ``flaky_outcome`` a right pick's outcome pays a quarter
of the time, while turn 1's ``choice`` stays exact::

    >>> env = gym.make("TurnRL/CreditChain-v0", preset="flaky_outcome", horizon=8).unwrapped
    >>> env.noise, env.noise_level, env.reveal, env.outcome_prob
    (0.0, 'turn', True, 0.25)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agentgym_turn.core import Message, RewardLevel, TurnEnv, TurnResult, state_digest
from agentgym_turn.error import InvalidArgument, InvalidTask
from agentgym_turn.policies import ScriptedPolicy


@dataclass(frozen=True)
class CuePair:
    """Two options and the clue words that call for each, split into training and held-out words.

    Attributes:
        frame: the word that introduces the clue (``"Forecast: drizzle."``).
        options: the two option words.
        train: per option, the clue words of the training split.
        test: per option, the clue words of the held-out split (never in ``train``).
    """

    frame: str
    options: tuple[str, str]
    train: tuple[tuple[str, ...], tuple[str, ...]]
    test: tuple[tuple[str, ...], tuple[str, ...]]


#: The cue vocabulary: every clue word calls for exactly one option of its pair; 9 training and 3 held-out words per
#: option. A model that learns "rainy word -> umbrella" on the training words can carry it to the held-out ones.
CUE_PAIRS: tuple[CuePair, ...] = (
    CuePair(
        "Forecast",
        ("umbrella", "sunglasses"),
        (
            ("rain", "drizzle", "showers", "downpour", "storm", "thunderstorm", "rainy", "wet", "cloudburst"),
            ("sunny", "sunshine", "cloudless", "bright", "glare", "sunlit", "dazzling", "clear", "blazing"),
        ),
        (("monsoon", "torrential", "deluge"), ("radiant", "glaring", "unclouded")),
    ),
    CuePair(
        "Weather",
        ("coat", "shorts"),
        (
            ("snow", "frost", "freezing", "icy", "blizzard", "chilly", "frozen", "wintry", "cold"),
            ("hot", "warm", "scorching", "tropical", "summery", "balmy", "sweltering", "humid", "baking"),
        ),
        (("arctic", "frigid", "snowy"), ("muggy", "sultry", "steamy")),
    ),
    CuePair(
        "Map",
        ("boat", "car"),
        (
            ("river", "lake", "sea", "ocean", "bay", "harbor", "lagoon", "canal", "strait"),
            ("road", "highway", "street", "motorway", "freeway", "avenue", "lane", "boulevard", "parking"),
        ),
        (("pond", "fjord", "estuary"), ("garage", "driveway", "expressway")),
    ),
    CuePair(
        "Problem",
        ("doctor", "mechanic"),
        (
            ("fever", "cough", "flu", "headache", "rash", "sprain", "nausea", "infection", "sneezing"),
            ("puncture", "engine", "brakes", "gearbox", "clutch", "radiator", "exhaust", "muffler", "carburetor"),
        ),
        (("bruise", "migraine", "measles"), ("transmission", "axle", "alternator")),
    ),
)
SPLITS = ("train", "test")
MAX_HORIZON = 100
NOISE_LEVELS = ("turn", "outcome")
#: Named regimes (every kwarg but ``horizon`` and ``split``); see the class docstring's table for what each shows.
#: ``gym.make(..., preset=name)`` takes them, and a kwarg passed alongside overrides the preset's value.
PRESETS: dict[str, dict[str, Any]] = {
    # today's default: the noise is turn-level, the outcome exact; outcome-only credit must not lose here
    "umbrella": {"noise": 1.0, "noise_level": "turn", "reveal": False, "outcome_prob": 1.0},
    # bsuite's return: the noise is part of the outcome, turn 1 pays an exact `choice`; turn-level credit must win
    "noisy_outcome": {"noise": 1.0, "noise_level": "outcome", "reveal": True, "outcome_prob": 1.0},
    # a sparse outcome (a right pick pays 1 a quarter of the time), no noise, an exact `choice`: turn-level wins
    "flaky_outcome": {"noise": 0.0, "noise_level": "turn", "reveal": True, "outcome_prob": 0.25},
}
SYSTEM_PROMPT = (
    "Turn 1: pick the option that fits the clue, as <choice>option</choice>. Later turns: answer each request as "
    "<answer>...</answer>. Your pick is scored after the last turn."
)
#: The distractor requests and a well-formed answer to each (the scripted policies' answer; any answer is paid alike).
REQUESTS: tuple[tuple[str, str], ...] = (
    ("Say a number from 1 to 9.", "7"),
    ("Name a color.", "blue"),
    ("Say yes or no.", "yes"),
    ("Name an animal.", "cat"),
)
FINAL_REQUEST = ("Say done.", "done")
#: What the distractor turns ask: ``"open"`` draws each request from :data:`REQUESTS` (a number, a color, yes or
#: no, an animal: answers a sampled policy varies), ``"fixed"`` asks ``Say done.`` at every one (a single answer).
DISTRACTORS = ("open", "fixed")
_CHOICE = re.compile(r"<choice>(.*?)</choice>", re.S | re.I)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_TRIM = " \t\r\n.,;:!?\"'`*"


def parse_pairs(pairs: str | Sequence[str] | None) -> tuple[str, ...]:
    """The frames of the option pairs to pose, in :data:`CUE_PAIRS` order: ``None`` is all four, ``"Map"`` or
    ``"Map,Forecast"`` or ``["Map", "Forecast"]`` a subset (case-insensitive).

    >>> parse_pairs(None), parse_pairs("map, forecast")
    (('Forecast', 'Weather', 'Map', 'Problem'), ('Forecast', 'Map'))
    """
    frames = tuple(p.frame for p in CUE_PAIRS)
    if pairs is None:
        return frames
    names = pairs.split(",") if isinstance(pairs, str) else pairs
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise InvalidArgument(f"pairs={pairs!r}; use None (all four) or frame names from {frames}, e.g. 'Map'.")
    wanted = {n.strip().lower() for n in names if n.strip()}
    unknown = sorted(wanted - {f.lower() for f in frames})
    if unknown or not wanted:
        raise InvalidArgument(
            f"pairs={pairs!r} names {unknown or 'nothing'}; use frame names from {frames}, e.g. 'Map' or "
            "'Map,Forecast'."
        )
    return tuple(f for f in frames if f.lower() in wanted)


def build_tasks(split: str, pairs: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every task of ``split``: each clue word of the split with its pair's options in both orders (no duplicates),
    over the option pairs ``pairs`` names (:func:`parse_pairs`; all four by default).

    ``build_tasks("train")`` has 144 tasks (72 clue words), ``build_tasks("test")`` 48 (24 clue words); with
    ``pairs="Map"``, 36 and 12.
    """
    if split not in SPLITS:
        raise InvalidArgument(f"split={split!r}; use one of {SPLITS} ('test' holds the held-out clue words).")
    frames = parse_pairs(pairs)
    tasks = []
    for pair in (p for p in CUE_PAIRS if p.frame in frames):
        words = pair.train if split == "train" else pair.test
        for side, option in enumerate(pair.options):
            for cue in words[side]:
                for shown in (pair.options, pair.options[::-1]):
                    tasks.append(
                        {
                            "id": f"{cue}:{shown[0]}-{shown[1]}",
                            "frame": pair.frame,
                            "cue": cue,
                            "options": list(shown),
                            "answer": option,
                        }
                    )
    return tasks


def parse_choice(text: str, options: list[str]) -> str | None:
    """The option named in the last ``<choice>...</choice>`` (case, spaces and punctuation around it ignored), or
    ``None`` when there is no such tag or it names no option (``"<choice>umbrella or coat</choice>"``)."""
    found = _CHOICE.findall(text)
    if not found:
        return None
    picked = found[-1].strip(_TRIM).lower()
    return picked if picked in options else None


def parse_answer(text: str) -> str | None:
    """The stripped text of the last non-empty ``<answer>...</answer>``, or ``None``."""
    found = [a.strip() for a in _ANSWER.findall(text)]
    found = [a for a in found if a]
    return found[-1] if found else None


def reward_outcome(choice: str | None, answer: str) -> float:
    """1.0 when turn 1's choice is the task's answer, else 0.0 (a wrong, missing or malformed choice)."""
    return 1.0 if choice == answer else 0.0


def distractor_noise(rng: np.random.Generator, n: int, scale: float) -> list[float]:
    """``n`` distractor rewards, each ``+scale`` or ``-scale`` with probability 1/2 (mean 0, std ``scale``), as
    bsuite's umbrella chain pays its intermediate steps. ``n`` signs are drawn whatever ``scale`` is, so the same
    seed poses the same episode at every noise level."""
    signs = 2 * rng.integers(0, 2, size=n) - 1
    return [float(scale * s) for s in signs]


def outcome_paid(rng: np.random.Generator, prob: float) -> bool:
    """Whether this episode's outcome pays a right pick (probability ``prob``). One uniform draw whatever ``prob``
    is, so the same seed poses the same episode at every ``outcome_prob`` (and a seed paid at ``prob`` is paid at
    every larger one)."""
    return bool(rng.random() < prob)


def _is_real(x: object) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# ------------------------------------------------------------------------------------------------ scripted policies
def _later_turn(env: TurnEnv) -> str:
    """A well-formed answer to the pending request (a later turn)."""
    return f"<answer>{env.pending_answer}</answer>"  # type: ignore[attr-defined]


def oracle_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Pick the right option, then answer every request well-formed."""
    return f"<choice>{env.task['answer']}</choice>" if env.turn == 0 else _later_turn(env)


def random_choice_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Pick one of the two options uniformly at random (right half the time), then answer well-formed."""
    return f"<choice>{env.task['options'][int(rng.integers(2))]}</choice>" if env.turn == 0 else _later_turn(env)


def first_option_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Pick the option shown first (the position baseline: right half the time, as both orders are posed)."""
    return f"<choice>{env.task['options'][0]}</choice>" if env.turn == 0 else _later_turn(env)


def second_option_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Pick the option shown second (with ``first_option`` on the same task: one demonstration of each option)."""
    return f"<choice>{env.task['options'][1]}</choice>" if env.turn == 0 else _later_turn(env)


def wrong_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Pick the other option, then answer well-formed."""
    if env.turn > 0:
        return _later_turn(env)
    return f"<choice>{next(o for o in env.task['options'] if o != env.task['answer'])}</choice>"


class CreditChainEnv(TurnEnv):
    """An early choice pays off ``horizon - 1`` turns later, across distractor turns whose rewards are noise.

    ## Description
    bsuite's umbrella_length experiment in chat form: only the first action matters, its payoff comes at the end, and
    every step in between pays a random ±1 that no action influences. Turn 1 shows a clue word (``Forecast: drizzle.``)
    and two options (``umbrella``, ``sunglasses``); exactly one fits the clue. Turns 2..H-1 are distractors: a short
    request (``Say yes or no.``) whose reward is ``+noise`` or ``-noise`` at random. Turn H pays the outcome: 1 when
    turn 1 picked the fitting option (with ``outcome_prob < 1``, only some of the time). The clue words come in four
    pairs of options (umbrella / sunglasses, coat / shorts, boat / car, doctor / mechanic); each word is posed with the
    options in both orders, so neither position nor a memorised option wins. Held-out clue words (``split="test"``)
    never appear in training; what carries over is the mapping (rainy words -> umbrella, ...), one a small model can
    hold (SmolLM2-135M learning it under RL is not measured yet).

    Its purpose is to show where turn-level credit must beat outcome-only credit, where it must tie, and where it
    must lose (the table under Rewards). Three kwargs set that: ``reveal`` (turn 1 pays an exact turn-level
    ``choice``), ``outcome_prob`` (a right pick's outcome pays only some of the time) and ``noise_level`` (the noise
    is a turn-level component, or part of the outcome as in bsuite's return); ``preset`` names the useful regimes.

    ## Observation
    ``reset``: a system message (the two tags and that the pick is scored at the end) and ``Turn 1/H. <frame>:
    <clue>. Take <a> or <b>?``. After turn k < H: ``Turn k+1/H. <request>`` (the last one: ``Say done.``), prefixed
    with ``Error: ...`` when turn 1 named no option or a later turn had no ``<answer>``. The text never says whether
    the pick was right. After turn H: ``[]``.

    ## Action
    Any text. Turn 1: the last ``<choice>...</choice>`` counts; its content must be one of the two options (case,
    spaces and punctuation around it ignored), anything else counts as a wrong pick. Later turns: free text; a
    ``<answer>...</answer>`` is asked for but not paid (``env/answer_rate`` counts it). A choice tag after turn 1 is
    ignored.

    ## Rewards
    ============= ======== ===============================================================================
    component     level    value
    ============= ======== ===============================================================================
    choice        turn     turn 1 only, only with ``reveal=True``: 1.0 for the fitting option, else 0.0
                           (exact: ``outcome_prob`` does not touch it)
    distractor    turn     turns 2..H-1 with ``noise_level="turn"``: ``+noise`` or ``-noise``, each with
                           probability 1/2, independent of the action (drawn at reset: a fork keeps them)
    outcome_noise outcome  the same draws with ``noise_level="outcome"``: paid at the same turns, but counted
                           as part of the outcome (bsuite's return), so outcome-only credit reads them too
    outcome       outcome  turn H: 1.0 when turn 1 picked the fitting option and the episode's coin pays
                           (probability ``outcome_prob``, drawn at reset: a fork keeps it), else 0.0
    ============= ======== ===============================================================================

    The step rewards are the same at either ``noise_level``; only the level the noise is declared at differs.

    What the critic-free strategies of ``trainers.credit`` make of it: ``bench/credit_chain_oracle.py`` plays 200
    groups of 8 random-pick episodes per setting (default ``CreditConfig``) and gives the correlation between turn
    1's advantage and a right pick (1: the pick alone sets its credit; 0: its credit is noise), and the paired 95%
    bootstrap interval (over groups) of MT-GRPO's correlation minus GRPO-OR's. Settings are the ``PRESETS`` (see
    Arguments) with the kwargs shown::

        setting                     H    grpo_or grpo_mr rloo mt_grpo mt_grpo_rtg gigpo   mt_grpo - grpo_or
        noise=0, exact outcome      any  0.93    0.93    0.93 0.93    0.93        0.93    [+0.00, +0.00]
        umbrella (the default)      2    0.93    0.93    0.93 0.93    0.93        0.93    [+0.00, +0.00]
                                    4    0.93    0.22    0.33 0.55    0.66        0.21    [-0.43, -0.33]
                                    8    0.93    0.14    0.18 0.34    0.65        0.13    [-0.65, -0.53]
          noise=0.1                 8    0.93    0.84    0.84 0.34    0.65        0.83    [-0.65, -0.53]
          reveal=True               8    0.93    0.29    0.34 0.58    0.71        0.29    [-0.38, -0.32]
        noisy_outcome               2    0.93    0.93    0.93 0.93    0.93        0.93    [+0.00, +0.00]
                                    4    0.22    0.44    0.56 0.73    0.73        0.44    [+0.45, +0.57]
                                    8    0.14    0.29    0.34 0.71    0.71        0.29    [+0.52, +0.61]
          reveal=False              8    0.14    0.14    0.18 0.14    0.14        0.13    [+0.00, +0.00]
        flaky_outcome               2    0.34    0.86    0.84 0.81    0.81        0.86    [+0.45, +0.50]
                                    4    0.34    0.86    0.84 0.81    0.81        0.87    [+0.44, +0.49]
                                    8    0.33    0.86    0.84 0.81    0.81        0.88    [+0.46, +0.51]
          reveal=False              8    0.33    0.33    0.33 0.33    0.33        0.33    [+0.00, +0.00]
          noise=1                   4    0.34    0.27    0.39 0.59    0.36        0.27    [+0.21, +0.30]
                                    8    0.33    0.17    0.21 0.41    0.31        0.18    [+0.03, +0.14]

    * **Turn-level credit must win** (``noisy_outcome`` at ``horizon >= 3``, ``flaky_outcome`` at every horizon):
      the outcome is noisy (the distractors' noise is part of it) or sparse (a right pick pays a quarter of the
      time), and turn 1 pays an exact ``choice``. GRPO-OR can only read the outcome; MT-GRPO adds turn 1's own
      ``choice`` advantage (+0.45 to +0.61 over GRPO-OR); GiGPO (+0.14 to +0.24 with the noisy outcome, +0.49 to
      +0.58 with the flaky one) wins too, less with the noise, since its turn-1 credit reads the merged return (see
      below). A trainer whose MT-GRPO does not beat GRPO-OR on these credits turns wrongly.
    * **It must tie** where there is no turn-level reward to read (``reveal=False`` with ``noise_level="outcome"``
      or ``noise=0``): MT-GRPO's turn-1 advantage is then GRPO-OR's, number for number (every ``A^T`` is 0, so
      ``A_1 = A^O``). And where the turn-level reward says what the outcome says: ``noisy_outcome`` at
      ``horizon=2`` has no distractor, so the outcome is the pick's exact ``choice`` again, turn 1's ``A^T`` equals
      ``A^O``, and MT-GRPO's turn-1 advantage is GRPO-OR's doubled (``A^T + A^O``, same sign in every group): a
      larger step the same way, not different credit (the correlations in the table are equal).
    * **It must not win** with the default ``umbrella``: the noise is turn-level, GRPO-OR never reads it and stays
      at 0.93, merged returns lose the pick in it as the horizon grows (bsuite's umbrella_length result), and
      MT-GRPO normalises each distractor turn per turn index, so every one adds a unit-scale random advantage to
      turn 1's, as large at ``noise=0.1`` as at 1; ``mt_grpo_rtg`` (returns-to-go normalised per index) loses less.
      ``flaky_outcome`` with ``noise=1`` mixes both: MT-GRPO still wins, by less as H grows; GiGPO loses.
    * GiGPO: turn 1 acts in one anchor state shared by the whole group (the ``state_key`` holds the task and the
      pick, so groups split by pick from turn 2 on), so its turn-1 step-level advantage is the group-normalised
      discounted return, and its turn-1 credit follows ``grpo_mr``'s. With ``noise=0`` and an exact outcome only
      the pick differs between episodes and every strategy credits it alike; the horizon then tests how a strategy
      carries the outcome back (MT-GRPO with ``turn_coef * turn_gamma = c`` gives turn 1 the weight ``c^(H-1)``; a
      critic, ``mt_ppo`` or ``ppo_or``, must carry the value across the distractor turns' tokens).

    ## Episode End
    ``terminated`` after turn ``horizon`` (the budget is the task; no earlier end). ``truncated`` is never set by the
    env. The final ``info["episode_metrics"]`` holds ``env/success`` (the pick was right), ``env/choice_valid`` (turn 1
    named an option), ``env/answer_rate`` (later turns with an ``<answer>``), ``env/distractor_return`` (the noise
    paid) and ``env/horizon``.

    ## Arguments
    ``gym.make("TurnRL/CreditChain-v0", horizon=4, noise=1.0, reveal=False, outcome_prob=1.0, noise_level="turn",
    preset=None, distractors="open", split="train", pairs=None)`` (these values are the defaults, the ``umbrella``
    preset):

    * ``horizon`` (2..100): turns per episode; the outcome comes ``horizon - 1`` turns after the pick, with
      ``horizon - 2`` distractor turns between (none at 2). A trainer's ``--max-turns`` must be at least this.
    * ``noise`` (>= 0): the size of each distractor turn's random reward (bsuite: 1); 0 pays 0.0 there.
    * ``reveal``: turn 1 pays ``choice`` (1 for the fitting option); ``False`` pays nothing there, so only the
      outcome carries the signal back.
    * ``outcome_prob`` (in (0, 1]): the probability that a right pick's outcome pays 1 (a coin drawn at reset,
      whatever the pick; a wrong pick pays 0 either way). Below 1 the outcome is a sparse, attenuated signal of
      the pick, while ``choice`` stays exact. ``env/success`` still says whether the pick was right.
    * ``noise_level``: ``"turn"`` pays the noise as the turn-level ``distractor`` component; ``"outcome"`` as the
      outcome-level ``outcome_noise`` (bsuite's return, which does not tell them apart).
    * ``preset``: one of :data:`PRESETS`, the rows of the table above: ``"umbrella"`` (the defaults),
      ``"noisy_outcome"`` (``noise=1, noise_level="outcome", reveal=True``) or ``"flaky_outcome"`` (``noise=0,
      reveal=True, outcome_prob=0.25``). It sets ``noise``, ``reveal``, ``outcome_prob`` and ``noise_level``; any
      of them passed too overrides the preset's (``preset="flaky_outcome", noise=1.0``). From a trainer:
      ``--env-kwarg preset=noisy_outcome --env-kwarg horizon=8``.
    * ``distractors``: what the distractor turns ask (:data:`DISTRACTORS`). ``"open"`` draws a short request
      (``Say a number from 1 to 9.``, ``Name a color.``, ``Say yes or no.``, ``Name an animal.``); a policy sampled
      at temperature 1 varies its answers, and every strategy hands those answer tokens the outcome's advantage,
      noise included, so part of each update is noise in weights the pick shares. ``"fixed"`` asks ``Say done.``
      at every distractor turn, whose one answer a cold start makes near certain, so the noise stays in the
      rewards and out of the update (a pilot found this a smaller limit than the number of optimizer steps:
      ``experiments/runs/credit_chain/NOTES.md``). The rewards are the same either way.
    * ``split``: ``"train"`` (144 tasks, 72 clue words) or ``"test"`` (48 tasks, 24 held-out clue words; the
      registry's held-out kwargs).
    * ``pairs``: which option pairs are posed, by frame (:func:`parse_pairs`): ``None`` (all four), ``"Map"``, or
      ``"Map,Forecast"`` / ``["Map", "Forecast"]``. One pair gives 36 training tasks (18 clue words) and 12
      held-out ones (6 words). With one pair every group of a step asks the same pair, half its clues calling for
      each option, so what a step's update does to "prefer this option whatever the clue" cancels out and the
      clue-specific part is what is left; with four pairs a step of 8 tasks gives each pair about 2 clue words.
      Pass the same value to the evaluation (``--eval-env-kwarg pairs=Map``).

    ``reset(options={"task": {"frame": ..., "cue": ..., "options": [a, b], "answer": a}})`` poses a task of your
    own. Tasks are drawn uniformly from the split with ``self.np_random``; the same seed poses the same task,
    requests, noise signs and outcome coin at every ``noise``, ``reveal``, ``noise_level`` and ``outcome_prob`` (a
    coin that pays at one ``outcome_prob`` pays at every larger one), and the same task, noise signs and coin at
    either ``distractors``.

    ## Version History
    * v0: initial version. Choices: outcome 1/0 (bsuite pays ±1); distractor noise ±``noise`` (bsuite's ±1 at 1); the
      noise is drawn at reset, so tree rollouts' forked siblings share it (independent episodes of a group do not); a
      missing or malformed pick is a wrong pick; ``outcome_prob`` is one coin per episode, drawn at reset after the
      noise (so a seeded episode at the defaults pays what it did before the kwarg existed); ``outcome_noise`` pays the
      noise at the distractor turns, not folded into turn H's ``outcome``, so the step rewards and ``outcome``'s 0/1
      values stay the same at either ``noise_level``. Later, without a version bump (the defaults pose and pay what
      they did): ``distractors="fixed"``, ``pairs``.
    """

    reward_levels: ClassVar[dict[str, RewardLevel]] = {
        "choice": "turn",
        "distractor": "turn",
        "outcome_noise": "outcome",
        "outcome": "outcome",
    }
    scripted_policies: ClassVar[dict[str, ScriptedPolicy]] = {
        "oracle": oracle_policy,
        "random_choice": random_choice_policy,
        "first_option": first_option_policy,
        "second_option": second_option_policy,
        "wrong": wrong_policy,
    }

    def __init__(
        self,
        horizon: int = 4,
        noise: float | None = None,
        reveal: bool | None = None,
        *,
        outcome_prob: float | None = None,
        noise_level: str | None = None,
        preset: str | None = None,
        distractors: str = "open",
        split: str = "train",
        pairs: str | Sequence[str] | None = None,
        render_mode: str | None = None,
        max_action_chars: int = 4096,
    ) -> None:
        super().__init__(render_mode=render_mode, max_action_chars=max_action_chars)
        if preset is not None and preset not in PRESETS:
            raise InvalidArgument(f"preset={preset!r}; use one of {tuple(PRESETS)} or None (the 'umbrella' values).")
        given = {"noise": noise, "reveal": reveal, "outcome_prob": outcome_prob, "noise_level": noise_level}
        kw = {**PRESETS[preset or "umbrella"], **{k: v for k, v in given.items() if v is not None}}
        noise, reveal, outcome_prob, noise_level = kw["noise"], kw["reveal"], kw["outcome_prob"], kw["noise_level"]
        if not isinstance(horizon, int) or isinstance(horizon, bool) or not 2 <= horizon <= MAX_HORIZON:
            raise InvalidArgument(
                f"horizon={horizon!r} must be an int from 2 to {MAX_HORIZON} (turn 1 picks, turn horizon pays)."
            )
        if not _is_real(noise) or noise < 0:
            raise InvalidArgument(f"noise={noise!r} must be a finite number >= 0 (0 = distractors pay nothing).")
        if not isinstance(reveal, bool):
            raise InvalidArgument(f"reveal={reveal!r} must be True or False.")
        if not _is_real(outcome_prob) or not 0 < outcome_prob <= 1:
            raise InvalidArgument(
                f"outcome_prob={outcome_prob!r} must be a number in (0, 1] (1 = a right pick always pays its outcome)."
            )
        if noise_level not in NOISE_LEVELS:
            raise InvalidArgument(
                f"noise_level={noise_level!r}; use 'turn' (the noise is its own turn-level component) or 'outcome' "
                "(it counts as part of the outcome)."
            )
        if distractors not in DISTRACTORS:
            raise InvalidArgument(
                f"distractors={distractors!r}; use 'open' (varied requests) or 'fixed' (every distractor turn asks "
                "'Say done.')."
            )
        self.horizon = horizon
        self.distractors = distractors
        self.noise = float(noise)
        self.reveal = reveal
        self.outcome_prob = float(outcome_prob)
        self.noise_level = noise_level
        self.preset = preset
        self.split = split
        self.pairs = parse_pairs(pairs)
        self.tasks = build_tasks(split, self.pairs)  # raises on an unknown split
        self._choice: str | None = None
        self._noise: list[float] = []
        self._paid = True
        self._requests: list[tuple[str, str]] = []
        self._answers = 0
        self._pending: tuple[str, str] = FINAL_REQUEST

    @property
    def pending_answer(self) -> str:
        """A well-formed answer to the request the agent must answer next (what the scripted policies say)."""
        return self._pending[1]

    # ------------------------------------------------------------------ tasks
    def _sample_task(self) -> dict[str, Any]:
        return dict(self.tasks[int(self.np_random.integers(len(self.tasks)))])

    def task_list(self) -> list[dict[str, Any]]:
        """Every task of the split (:func:`build_tasks`' order; :meth:`agentgym_turn.core.TurnEnv.task_list`)."""
        return self.tasks

    def _validate_task(self, task: Mapping[str, Any]) -> dict[str, Any]:
        options = task.get("options")
        ok = (
            isinstance(task.get("cue"), str)
            and isinstance(options, list | tuple)
            and len(options) == 2
            and all(isinstance(o, str) and o == o.strip(_TRIM).lower() and o for o in options)
            and options[0] != options[1]
            and task.get("answer") in options
        )
        if not ok:
            raise InvalidTask(
                "a CreditChain task needs 'cue' (str), 'options' (two different lowercase words) and 'answer' (one "
                "of them), e.g. {'frame': 'Forecast', 'cue': 'rain', 'options': ['umbrella', 'sunglasses'], "
                "'answer': 'umbrella'}; got " + repr(dict(task))[:200]
            )
        out = {"frame": "Clue", **dict(task), "options": list(options)}
        out.setdefault("id", f"{out['cue']}:{options[0]}-{options[1]}")
        return out

    def _begin(self, task: dict[str, Any]) -> list[Message]:
        n = self.horizon - 2
        self._noise = distractor_noise(self.np_random, n, self.noise)
        drawn = self.np_random.integers(len(REQUESTS), size=n)  # drawn either way: the coin below stays the same
        self._requests = [REQUESTS[int(i)] if self.distractors == "open" else FINAL_REQUEST for i in drawn]
        self._requests.append(FINAL_REQUEST)
        self._paid = outcome_paid(self.np_random, self.outcome_prob)  # drawn last: the draws above never change
        self._choice = None
        self._answers = 0
        self._pending = FINAL_REQUEST
        a, b = task["options"]
        opening = f"Turn 1/{self.horizon}. {task['frame']}: {task['cue']}. Take {a} or {b}?"
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": opening}]

    # ------------------------------------------------------------------ turns
    def _turn(self, text: str) -> TurnResult:
        assert self._task is not None
        text = text[: self.max_action_chars]
        options, answer = self._task["options"], self._task["answer"]
        components: dict[str, float] = {}
        info: dict[str, Any] = {}
        error = ""
        if self.turn == 1:
            self._choice = parse_choice(text, options)
            info["choice"] = self._choice
            if self.reveal:
                components["choice"] = reward_outcome(self._choice, answer)
            if self._choice is None:
                error = f"Error: no <choice> naming {options[0]} or {options[1]}; that counts as a wrong pick. "
        else:
            got = parse_answer(text)
            info["answer"] = got
            if got is None:
                error = "Error: no <answer>...</answer>. "
            else:
                self._answers += 1
            if self.turn < self.horizon:
                components["distractor" if self.noise_level == "turn" else "outcome_noise"] = self._noise[self.turn - 2]
        if self.turn >= self.horizon:
            components["outcome"] = reward_outcome(self._choice, answer) if self._paid else 0.0
            return TurnResult([], components, True, info)
        self._pending = self._requests[self.turn - 1]
        content = f"{error}Turn {self.turn + 1}/{self.horizon}. {self._pending[0]}"
        return TurnResult([{"role": "user", "content": content}], components, False, info)

    def _state_key(self) -> str | None:
        """Anchor-state key: the task, the turn index, turn 1's pick (it decides the outcome) and the pending request
        (the noise still to come is not observed, so it is not part of the state)."""
        if self._task is None:
            return None
        pending = self._pending[0] if self.turn else ""
        return f"t{self.turn}:" + state_digest(self._task["id"], self._task["cue"], self._choice, pending)

    def _episode_metrics(self) -> dict[str, float]:
        assert self._task is not None
        later = self.turn - 1
        return {
            "env/success": reward_outcome(self._choice, self._task["answer"]) if self.turn >= 1 else 0.0,
            "env/choice_valid": float(self._choice is not None),
            "env/answer_rate": self._answers / later if later > 0 else 0.0,
            "env/distractor_return": float(sum(self._noise[: max(0, min(self.turn, self.horizon - 1) - 1)])),
            "env/horizon": float(self.horizon),
        }
