"""TurnRL/Sokoban-v2: push the box onto the target in at most 3 turns of up to 3 actions (MT-PPO extended, App. E).

A worked episode on a posed room (a 1 x 3 corridor: player, box, floor, target)::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/Sokoban-v2")
    >>> messages, info = env.reset(seed=0, options={"task": {"id": "corridor", "room": ["######", "#PX_O#", "######"]}})
    >>> _, reward, terminated, _, info = env.step("<think>the box is right of me</think><answer>Right</answer>")
    >>> round(reward, 2), terminated, info["reward_components"]
    (0.4, False, {'format': 0.5, 'box_placement': 0.0, 'step_penalty': -0.1})
    >>> _, reward, terminated, _, info = env.step("<think>one more push</think><answer>Right || Up</answer>")
    >>> reward, terminated, info["reward_components"]
    (11.5, True, {'format': 0.5, 'box_placement': 1.0, 'step_penalty': 0.0, 'success': 10.0})
    >>> info["episode_metrics"]["env/success"], info["episode_metrics"]["env/effective_action_rate"]
    (1.0, 1.0)

Only actions that contribute to moving a box are effective (Fig. 7): walking away and back before a push counts
the two detour steps as ineffective, while every step changed the state::

    >>> _ = env.reset(seed=0, options={"task": {"id": "detour", "room": ["#######", "#_PX_O#", "#######"]}})
    >>> _, _, terminated, _, info = env.step("<think>detour</think><answer>Left || Right || Right</answer>")
    >>> _, _, terminated, _, info = env.step("<think>push</think><answer>Right</answer>")
    >>> ep = info["episode_metrics"]
    >>> ep["env/effective_actions"], ep["env/actions"], ep["env/state_changing_action_rate"]
    (2.0, 4.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from agentgym_turn.core import Message, RewardLevel, TurnEnv, TurnResult, state_digest
from agentgym_turn.error import InvalidArgument, InvalidTask
from agentgym_turn.policies import ScriptedPolicy
from envs.sokoban.board import Board, Pos, apply_move, board_rows, parse_board, render_board
from envs.sokoban.policies import bfs_explore_policy, bfs_policy, random_policy
from envs.sokoban.rewards import (
    ACTION_SEPARATOR,
    BOX_PLACEMENT_REWARD,
    FORMAT_REWARD,
    STEP_PENALTY,
    SUCCESS_REWARD,
    parse_turn,
    reward_turn,
)
from envs.sokoban.rooms import SPLITS, RoomConfig, find_room, layout_key
from envs.sokoban.solver import walk_distance

SYSTEM_PROMPT = """You are solving a Sokoban puzzle on a grid.
Symbols: # wall, _ floor, O target, X box, √ box on a target, P you (the player), S you standing on a target.
Goal: push every box onto a target. You move one cell Up, Down, Left or Right; walking into a box pushes it one \
cell further when the cell behind it is free. Boxes cannot be pulled, so a box pushed into a corner or against a \
wall may be stuck for good: think ahead.
You have {max_turns} turns; in each turn you may play up to {max_actions} actions.
Answer every turn in this exact format, reasoning first, then your actions separated by "{sep}":
<think>your reasoning about the grid</think><answer>Up {sep} Left {sep} Down</answer>
Rewards: +{format_reward:g} for a well-formed turn, +{box_reward:g} for each box you push onto a target, \
{step_penalty:g} for each action while the puzzle is unsolved, and +{success_reward:g} when every box is on a target."""

#: How ``env/effective_actions`` counts: ``"box-movement"`` (v1, 001 Fig. 7: pushes and the shortest walks to them)
#: or ``"state-change"`` (v0: every action that changed the state).
EFFECTIVE_ACTIONS = ("box-movement", "state-change")

#: The long-horizon variant (named kwargs of v2): two boxes, 6 turns of up to 3 actions, rooms whose shortest
#: solution needs 10 to 18 actions: ``gym.make("TurnRL/Sokoban-v2", **LONG_HORIZON_KWARGS)``.
LONG_HORIZON_KWARGS: dict[str, Any] = {"num_boxes": 2, "max_turns": 6, "min_solution_length": 10}

USER_PROMPT = """The room ({height} rows x {width} columns):
{grid}
Turn 1 of {max_turns}: play up to {max_actions} actions."""


class SokobanEnv(TurnEnv):
    """Sokoban as a multi-turn chat task: several moves per turn, a reward every turn.

    ## Description
    The extended MT-PPO paper's game case study (Appendix E, Table 5): a room from gym-sokoban's generator
    (Schrader, 2018) with one box, whose shortest solution needs at least 5 actions (the paper's rooms are 6x6;
    v2's are 7x7, see Held-out rooms). Pushing is irreversible, so a
    wrong push can make the room unsolvable. The agent sees the room as text and plays up to 3 actions per turn for
    at most 3 turns. Rooms are drawn from seeds with ``self.np_random`` and filtered with a BFS solver by shortest
    solution length (``min_solution_length`` <= length <= ``max_solution_length``; the upper bound defaults to the
    turn budget so that every room is solvable in the episode).

    **Held-out rooms** (v2): ``split="train"`` (default) and ``split="test"`` (what evaluations pose, the registry's
    held-out kwargs) draw from disjoint room layouts. A room's layout key hashes its walls, targets and boxes under
    the grid's 8 rotations and reflections, without the player (rooms that differ only in where the player starts
    are one puzzle); the key alone puts it on one side (:func:`envs.sokoban.rooms.layout_split`: half of the
    layouts each), so no training draw ever poses a held-out layout. The generator's pool decides the room size:
    on 6x6 it is small and skewed (40,000 seeds: 13,411 rooms pass the filter, 2,976 distinct layouts, the most
    common 81 times; 64 draws repeat a layout with probability ~0.9), so v2 poses 7x7 rooms (4,000 seeds: 1,833
    rooms, 1,756 layouts; an evaluation's 64 held-out rooms are all different at ``--seed 12345`` and ``--seed 0``,
    and one pair at each is the same layout mirrored or turned: draws are independent, so repeats are rare, not
    impossible).
    ``disjoint_held_out=False`` gives v1's draw back: both splits take every room, held out by seed alone.

    **Long horizon**: ``gym.make("TurnRL/Sokoban-v2", num_boxes=2, max_turns=6, min_solution_length=10)``
    (:data:`LONG_HORIZON_KWARGS`): two boxes, 6 turns, 10 to 18 actions to solve. On 64 held-out rooms the BFS
    oracle and ``bfs_explore`` solve 1.0, the random policy 0.0 (``--seed 12345``).

    ## Observation
    ``reset``: a system message (rules, symbols, grammar, rewards) and a user message with the room, one row per
    line: ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on a target, ``P`` player, ``S`` player on a
    target. After each non-final turn: one user message with the actions played, the room after them and the
    turns left; it starts with ``"Error: ..."`` when the turn was malformed or an action was invalid or extra.
    After the final turn: ``[]``.

    ## Action
    The assistant's whole turn (any text): ``<think>...</think><answer>Up || Left || Down</answer>``. Action names
    are case-insensitive and separated by ``||``.

    Handling of bad text (never an exception): the actions are read from the first ``<answer>`` block, in order,
    up to the first token that is not an action name, and at most ``max_actions_per_turn`` of them; the rest are
    not played. A turn without an answer block (or longer than ``max_action_chars``) plays nothing. Such a turn
    still uses one of the turns. Moving into a wall, or pushing a box into a wall or another box, is a played
    action that changes nothing (a no-op: it is not an effective action and it pays the step penalty).
    Actions after the puzzle is solved within a turn are not played.

    ## Rewards
    Per turn (``reward_levels``):

    ============== ======== ===================================================================================
    component      level    value
    ============== ======== ===================================================================================
    format         turn     0.5 when the turn is well-formed (exactly ``<think>..</think><answer>..</answer>``,
                            nothing else around them, 1..3 valid actions), else 0
    box_placement  turn     +1 per push that moves a box from a non-target cell onto a target
    step_penalty   turn     -0.1 per action played after which the puzzle is still unsolved
    success        outcome  10 when every box is on a target, paid on the last turn (0 there otherwise)
    ============== ======== ===================================================================================

    ## Episode End
    ``terminated`` when every box is on a target or the turn budget (``max_turns``) is spent. ``truncated`` is
    never set by the env. The final ``info["episode_metrics"]`` holds ``env/success`` (1 or 0),
    ``env/effective_action_rate`` (effective actions / actions played; 0 when none was played), ``env/actions``,
    ``env/effective_actions``, ``env/state_changing_action_rate`` (actions that changed the state / actions played:
    v0's effective action rate), ``env/malformed_turns``, ``env/boxes_on_target`` and, for generated rooms,
    ``env/min_solution_length``.

    **Effective actions** follow Fig. 7's definition, "the proportion of actions that contribute to valid box
    movement", read as: a push that moves a box is effective, and so is each step of the shortest walk that brought
    the player to the cell it pushed from. Counted exactly: every push adds 1 plus the shortest walking distance
    (boxes fixed) from where the player stood after the previous push (or at the start) to where it stood before
    this push. Detours and back-and-forth steps beyond that shortest walk, walks after the last push, and no-ops
    (into a wall, or pushing a box into a wall or another box) are not effective. Walk-walk-push along a corridor
    scores 3/3, walk-back-walk-walk-push 3/5, walk-walk-walk with no push 0/3, and a BFS-optimal episode 1.0.
    Readings not taken: pushes only (the strictest literal reading; it caps an optimal player below 1, at
    0.55 on the default rooms, under the paper's 0.987 for MT-PPO), and "the state changed", which v0 counted
    (walks never followed by a push count too: the random policy scored 0.61). A push into a dead end is a valid box
    movement here (the box moved); the paper does not exclude it.

    ## Arguments
    ``gym.make("TurnRL/Sokoban-v2", dim=(7, 7), num_boxes=1, max_actions_per_turn=3, max_turns=3,
    min_solution_length=5, max_solution_length=None, num_gen_steps=None, effective_actions="box-movement",
    split="train", disjoint_held_out=True)``.
    ``max_solution_length=None`` means ``max_turns * max_actions_per_turn``; ``num_gen_steps=None`` means
    gym-sokoban's ``int(1.7 * (h + w))``. ``effective_actions``: what ``env/effective_actions`` and
    ``env/effective_action_rate`` count, ``"box-movement"`` (default, Fig. 7, see Episode End) or
    ``"state-change"`` (v0's count: every action that changed the state); nothing else depends on it.
    ``split``: ``"train"`` or ``"test"`` (the held-out rooms); ``disjoint_held_out``: whether the two splits keep
    apart by layout (v2) or both draw every room (v1). ``reset(options={"task": {"id": ..., "room": [row, ...]}})``
    poses a specific room (the symbols above).

    Scripted policies: ``bfs`` (the oracle: a shortest solution, re-planned each turn), ``bfs_explore`` (as good,
    but it draws among the shortest solutions' first moves and opens 20% of turns with a non-fatal detour: varied
    cold-start demonstrations) and ``random``.

    ## Version History
    Each version's id makes it; the kwargs give the same env under the newest id:

    * ``TurnRL/Sokoban-v0`` = ``gym.make("TurnRL/Sokoban-v2", effective_actions="state-change", dim=(6, 6),
      disjoint_held_out=False)`` (it warns).
    * ``TurnRL/Sokoban-v1`` = ``gym.make("TurnRL/Sokoban-v2", dim=(6, 6), disjoint_held_out=False)`` (it warns).
    * ``TurnRL/Sokoban-v2`` = ``gym.make("TurnRL/Sokoban-v2")``.

    * v0: Appendix E's setting. Choices where the paper is silent: a box pushed off a target pays nothing (the paper
      lists no such penalty; gym-sokoban's own env charges -1), and a push from one target onto another pays
      nothing (no box newly placed); the success reward is paid on the final turn; the step penalty is not charged
      for the action that solves the puzzle; the paper's limit of 100 steps per episode never binds under 3 x 3
      actions; rooms whose shortest solution exceeds the turn budget are filtered out. With one box the episode
      ends on the first placement, so box_placement cannot be farmed; with several boxes it can be earned again
      after pushing a box off and back on.
    * v1: ``env/effective_action_rate`` follows the paper's definition (pushes and the shortest walks to them, see
      Episode End); v0 counted every action that changed the state, now ``env/state_changing_action_rate``.
      Rewards, dynamics and rooms are unchanged; the id moved because leaderboards compare this metric. Random
      policy 0.611 -> 0.171, BFS oracle 1.0 -> 1.0 (128 rooms, seed 0; pushes only would give 0.139 and 0.545).
    * v2: held-out rooms apart from training by layout (``split="test"``, every id's held-out kwargs; see
      Held-out rooms): under v1, 41 of the 64 rooms an evaluation with ``--seed 12345`` posed were among
      2,000 training rooms (seeds 0-1999; 60 shared a layout), now none can be. Rooms are 7x7 (v1: 6x6), as the
      6x6 pool is too small for a split. Rewards and dynamics are unchanged. Scripted policy ``bfs_explore``
      added (``bfs`` and ``random`` unchanged). On 64 held-out rooms (``--seed 12345``): BFS oracle 1.0,
      ``bfs_explore`` 1.0 (effective action rate 0.92), random 0.0 (0.16).
    * Every id, no version bump: the episode metrics moved from ``info["episode"]`` to ``info["episode_metrics"]``
      (:data:`agentgym_turn.core.EPISODE_METRICS_KEY`), so Gymnasium's ``RecordEpisodeStatistics`` can add its
      own ``info["episode"]``; rewards, tasks and the metrics themselves are unchanged.
    """

    reward_levels: ClassVar[dict[str, RewardLevel]] = {
        "format": "turn",
        "box_placement": "turn",
        "step_penalty": "turn",
        "success": "outcome",
    }
    scripted_policies: ClassVar[dict[str, ScriptedPolicy]] = {
        "bfs": bfs_policy,
        "bfs_explore": bfs_explore_policy,
        "random": random_policy,
    }

    def __init__(
        self,
        *,
        dim: tuple[int, int] | list[int] = (7, 7),
        num_boxes: int = 1,
        max_actions_per_turn: int = 3,
        max_turns: int = 3,
        min_solution_length: int = 5,
        max_solution_length: int | None = None,
        num_gen_steps: int | None = None,
        render_mode: str | None = None,
        max_action_chars: int = 16_384,
        effective_actions: str = "box-movement",
        split: str = "train",
        disjoint_held_out: bool = True,
    ) -> None:
        super().__init__(render_mode=render_mode, max_action_chars=max_action_chars)
        if split not in SPLITS:
            raise InvalidArgument(
                f"split={split!r} is not known; use 'train' (default) or 'test' (the held-out rooms evaluations pose)."
            )
        if not isinstance(disjoint_held_out, bool):
            raise InvalidArgument(
                f"disjoint_held_out={disjoint_held_out!r} must be True (v2: the splits share no room layout) or "
                "False (v1: both splits draw from every room, held out by seed alone)."
            )
        self.split = split
        self.disjoint_held_out = disjoint_held_out
        if effective_actions not in EFFECTIVE_ACTIONS:
            raise InvalidArgument(
                f"effective_actions={effective_actions!r} is not known; use 'box-movement' (default, 001 Fig. 7) "
                "or 'state-change' (v0's count)."
            )
        self.effective_actions = effective_actions
        for name, value in (("max_actions_per_turn", max_actions_per_turn), ("max_turns", max_turns)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgument(f"{name}={value!r} must be a positive int (the paper uses 3).")
        if not isinstance(dim, tuple | list) or len(dim) != 2:
            raise InvalidArgument(f"dim={dim!r} must be (height, width), e.g. (6, 6).")
        dim = (dim[0], dim[1])
        budget = max_turns * max_actions_per_turn
        self.max_actions_per_turn = max_actions_per_turn
        self.max_turns = max_turns
        self.room_config = RoomConfig(
            dim=dim,
            num_boxes=num_boxes,
            num_gen_steps=int(1.7 * (dim[0] + dim[1])) if num_gen_steps is None else num_gen_steps,
            min_solution_length=min_solution_length,
            max_solution_length=budget if max_solution_length is None else max_solution_length,
        )
        self.board: Board | None = None
        self._actions_played = 0
        self._effective_actions = 0
        self._state_changes = 0
        self._walk_start: Pos | None = None  # where the player stood after the last push (or at the start)
        self._malformed_turns = 0

    # ------------------------------------------------------------------ tasks
    def _sample_task(self) -> dict[str, Any]:
        seed = int(self.np_random.integers(0, 2**31 - 1))
        room = find_room(seed, self.room_config, split=self.split if self.disjoint_held_out else None)
        h, w = self.room_config.dim
        return {
            "id": f"sokoban-{h}x{w}-b{self.room_config.num_boxes}-seed{room.seed}",
            "seed": room.seed,
            "room": board_rows(room.board),
            "min_solution_length": len(room.solution),
            "layout_key": room.layout_key,
        }

    def task_key(self, task: Mapping[str, Any]) -> str:
        """A room's layout (walls, targets, boxes; not the player), the same for its rotations and mirror images:
        an evaluation never poses one puzzle twice in another orientation."""
        key = task.get("layout_key")
        return f"layout:{key if key is not None else layout_key(parse_board(task['room']))}"

    def _validate_task(self, task: Mapping[str, Any]) -> dict[str, Any]:
        if "room" not in task:
            raise InvalidTask(
                f"a Sokoban task needs a 'room' (a list of row strings), got keys {sorted(task)}; e.g. "
                "{'id': 'corridor', 'room': ['######', '#PX_O#', '######']}."
            )
        board = parse_board(task["room"])
        if board.solved:
            raise InvalidTask(f"the room {task['room']!r} is already solved; pose one with a box off its target.")
        out = dict(task)
        out["room"] = board_rows(board)
        out.setdefault("id", "sokoban-" + "/".join(out["room"]))
        out["layout_key"] = layout_key(board)
        mins = out.get("min_solution_length")
        if mins is not None and (not isinstance(mins, int) or mins < 1):
            raise InvalidTask(f"'min_solution_length'={mins!r} must be a positive int or absent.")
        return out

    # ------------------------------------------------------------------ episode
    def _begin(self, task: dict[str, Any]) -> list[Message]:
        self.board = parse_board(task["room"])
        self._actions_played = 0
        self._effective_actions = 0
        self._state_changes = 0
        self._walk_start = self.board.player
        self._malformed_turns = 0
        system = SYSTEM_PROMPT.format(
            max_turns=self.max_turns,
            max_actions=self.max_actions_per_turn,
            sep=ACTION_SEPARATOR,
            format_reward=FORMAT_REWARD,
            box_reward=BOX_PLACEMENT_REWARD,
            step_penalty=STEP_PENALTY,
            success_reward=SUCCESS_REWARD,
        )
        user = USER_PROMPT.format(
            height=self.board.height,
            width=self.board.width,
            grid=render_board(self.board),
            max_turns=self.max_turns,
            max_actions=self.max_actions_per_turn,
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _state_key(self) -> str | None:
        """Anchor-state key: the board (one board reached by different move sequences is one state)."""
        return None if self.board is None else "board:" + state_digest(board_rows(self.board))

    def _turn(self, text: str) -> TurnResult:
        assert self.board is not None
        if len(text) > self.max_action_chars:
            parsed_actions: list[str] = []
            well_formed = False
            error: str | None = f"the turn is {len(text)} characters long; at most {self.max_action_chars} are read."
        else:
            parsed = parse_turn(text, self.max_actions_per_turn)
            parsed_actions, well_formed, error = parsed.actions, parsed.well_formed, parsed.error
        played: list[str] = []
        unsolved_after: list[bool] = []
        pushes_onto_target = 0
        board = self.board
        for action in parsed_actions:
            result = apply_move(board, action)
            if result.pushed_box:
                self._effective_actions += 1 + self._walk_to_push(board)
                self._walk_start = result.board.player
            board = result.board
            played.append(action)
            self._state_changes += int(result.moved)
            pushes_onto_target += int(result.pushed_onto_target)
            unsolved_after.append(not board.solved)
            if board.solved:
                break
        self.board = board
        self._actions_played += len(played)
        self._malformed_turns += int(not well_formed)
        ended = board.solved or self.turn >= self.max_turns
        components = reward_turn(
            well_formed=well_formed,
            pushes_onto_target=pushes_onto_target,
            unsolved_after=unsolved_after,
            solved=board.solved,
            ended=ended,
        )
        info: dict[str, Any] = {"actions_played": played, "solved": board.solved, "error": error}
        if ended:
            return TurnResult([], components, True, info)
        lines = [f"Error: {error}"] if error else []
        lines.append(f"Actions played: {', '.join(played) if played else 'none'}.")
        lines.append(f"The room now:\n{render_board(board)}")
        left = self.max_turns - self.turn
        lines.append(
            f"Turn {self.turn + 1} of {self.max_turns} ({left} left): play up to {self.max_actions_per_turn} actions."
        )
        return TurnResult([{"role": "user", "content": "\n".join(lines)}], components, False, info)

    def _walk_to_push(self, before: Board) -> int:
        """How many of the walks since the last push contributed to the push about to be played from ``before``:
        the shortest walk from where that walk run started to the cell the player pushes from."""
        assert self._walk_start is not None
        dist = walk_distance(before, self._walk_start, before.player)
        assert dist is not None  # the player walked there with these boxes in place
        return dist

    def _episode_metrics(self) -> dict[str, float]:
        assert self.board is not None and self._task is not None
        played = self._actions_played
        effective = self._effective_actions if self.effective_actions == "box-movement" else self._state_changes
        metrics = {
            "env/success": float(self.board.solved),
            "env/effective_action_rate": effective / played if played else 0.0,
            "env/state_changing_action_rate": self._state_changes / played if played else 0.0,
            "env/actions": float(played),
            "env/effective_actions": float(effective),
            "env/malformed_turns": float(self._malformed_turns),
            "env/boxes_on_target": float(self.board.boxes_on_target),
        }
        if self._task.get("min_solution_length") is not None:
            metrics["env/min_solution_length"] = float(self._task["min_solution_length"])
        return metrics
