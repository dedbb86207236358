"""Sokoban rooms from gym-sokoban's generator, kept when their shortest solution fits the turn budget.

    >>> room = find_room(0, RoomConfig())  # seeds 0 and 1 fail the filter, seed 2 passes
    >>> room.seed, len(room.solution)
    (2, 8)

Every room has a layout key (walls, targets and boxes, the same under the room's rotations and reflections), and
the key alone decides the room's side of the held-out split, so training and evaluation never share a layout::

    >>> room.layout_key[:12], layout_split(room.layout_key)
    ('71beb9470801', 'test')
    >>> find_room(0, RoomConfig(), split="train").seed  # the first seed from 0 whose room passes, on the train side
    14

Rooms come from ``gym_sokoban/envs/room_utils.py`` (Schrader, 2018), loaded by file path so that the package
``__init__`` (which needs the old ``gym`` and ``pkg_resources``) never runs. Boards and their dynamics live in
:mod:`envs.sokoban.board`; the filter's shortest solution comes from :mod:`envs.sokoban.solver`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

import numpy as np

from agentgym_turn.error import DependencyNotInstalled, InvalidArgument
from envs.sokoban.board import BOX, BOX_ON_TARGET, FLOOR, TARGET, WALL, Board
from envs.sokoban.solver import shortest_solution

# gym-sokoban's integer codes, as its env uses them (its generate_room docstring swaps 3 and 4).
_GS_WALL, _GS_FLOOR, _GS_TARGET, _GS_BOX_ON_TARGET, _GS_BOX, _GS_PLAYER = 0, 1, 2, 3, 4, 5

#: The held-out split's sides: a room is on ``"test"`` when its layout key, read as a number, is divisible by
#: :data:`TEST_MODULUS` (half of the layouts), else on ``"train"``.
SPLITS = ("train", "test")
TEST_MODULUS = 2


# ---------------------------------------------------------------------------------------------- layouts and split
def layout_key(board: Board) -> str:
    """A room's layout as a hex digest: its walls, targets and boxes, not the player, under the grid's 8 rotations
    and reflections (the smallest rendering of the 8 is hashed, so a mirrored or rotated room has the same key).

    The player is left out: rooms that differ only in where the player starts pose the same puzzle (the same pushes
    solve both), so they must fall on the same side of the split.
    """
    grid = np.full((board.height, board.width), FLOOR, dtype="<U1")
    for cells, symbol in ((board.walls, WALL), (board.targets, TARGET), (board.boxes, BOX)):
        for cell in cells:
            grid[cell] = symbol
    for cell in board.boxes & board.targets:
        grid[cell] = BOX_ON_TARGET
    renderings = []
    for turned in (grid, grid.T):
        for k in range(4):
            view = np.rot90(turned, k)
            renderings.append("\n".join("".join(row) for row in view))
    return hashlib.sha256(min(renderings).encode()).hexdigest()


def layout_split(key: str) -> str:
    """The side of the held-out split a layout key falls on: ``"test"`` or ``"train"`` (see :data:`TEST_MODULUS`)."""
    return "test" if int(key, 16) % TEST_MODULUS == 0 else "train"


# ---------------------------------------------------------------------------------------------- gym-sokoban rooms
_LOCK = threading.Lock()  # room_utils keeps its search state in module globals and uses the global RNGs
_ROOM_UTILS: ModuleType | None = None


def _room_utils() -> ModuleType:
    """gym-sokoban's ``envs/room_utils.py``, loaded by file path (it imports only random, numpy and marshal)."""
    global _ROOM_UTILS
    if _ROOM_UTILS is None:
        spec = importlib.util.find_spec("gym_sokoban")
        if spec is None or spec.origin is None:
            raise DependencyNotInstalled(
                "gym-sokoban is not installed; TurnRL/Sokoban uses its room generator. Install it without its "
                "dependencies (they pull the old `gym`): `pip install --no-deps gym-sokoban==0.0.6`, or run "
                "`bash scripts/setup.sh`."
            )
        path = os.path.join(os.path.dirname(spec.origin), "envs", "room_utils.py")
        file_spec = importlib.util.spec_from_file_location("_turnrl_gym_sokoban_room_utils", path)
        assert file_spec is not None and file_spec.loader is not None
        module = importlib.util.module_from_spec(file_spec)
        file_spec.loader.exec_module(module)
        _ROOM_UTILS = module
    return _ROOM_UTILS


def board_from_gym_sokoban(room_fixed: np.ndarray, room_state: np.ndarray) -> Board:
    """Convert gym-sokoban's (fixed, state) integer arrays into a :class:`Board`.

    Box-ness is read from the state (codes 3 and 4 both mean a box) and target-ness from the fixed layout (code 2),
    because the generator marks every box with 4 even when it stands on a target.
    """
    fixed = np.asarray(room_fixed).astype(int)
    state = np.asarray(room_state).astype(int)
    height, width = fixed.shape
    cells = [(r, c) for r in range(height) for c in range(width)]
    walls = frozenset(p for p in cells if fixed[p] == _GS_WALL)
    targets = frozenset(p for p in cells if fixed[p] == _GS_TARGET)
    boxes = frozenset(p for p in cells if state[p] in (_GS_BOX, _GS_BOX_ON_TARGET))
    players = [p for p in cells if state[p] == _GS_PLAYER]
    if len(players) != 1:
        raise RuntimeError(f"gym-sokoban generated a room with {len(players)} players (expected 1).")
    return Board(height, width, walls, targets, boxes, players[0])


def generate_board(seed: int, dim: tuple[int, int] = (6, 6), num_boxes: int = 1, num_gen_steps: int = 20) -> Board:
    """One room from gym-sokoban's generator seeded with ``seed`` (deterministic).

    Seeds both ``random`` and ``np.random`` (the generator uses both) and restores their global states afterwards.
    Raises ``RuntimeError`` / ``RuntimeWarning`` as the generator does when the seed yields no usable room.
    """
    room_utils = _room_utils()
    with _LOCK:
        py_state, np_state = random.getstate(), np.random.get_state()
        try:
            random.seed(seed)
            np.random.seed(seed % (2**32))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # keep RuntimeWarning an exception (raised, not warned) only
                fixed, state, _ = room_utils.generate_room(dim=dim, num_steps=num_gen_steps, num_boxes=num_boxes)
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
    return board_from_gym_sokoban(fixed, state)


@dataclass(frozen=True)
class RoomConfig:
    """How rooms are generated and filtered.

    Attributes:
        dim: (height, width) of the room, walls included.
        num_boxes: boxes (and targets) per room.
        num_gen_steps: length of the generator's random walk that carves the floor (gym-sokoban's default for a
            room is ``int(1.7 * (height + width))``).
        min_solution_length: keep only rooms whose shortest solution has at least this many actions.
        max_solution_length: and at most this many (rooms that need more cannot be solved within the turn budget).
    """

    dim: tuple[int, int] = (6, 6)
    num_boxes: int = 1
    num_gen_steps: int = 20
    min_solution_length: int = 5
    max_solution_length: int = 9

    def __post_init__(self) -> None:
        h, w = self.dim
        if not (isinstance(h, int) and isinstance(w, int) and h >= 4 and w >= 4):
            raise InvalidArgument(f"dim={self.dim!r}: a room needs at least 4 x 4 cells (walls included), e.g. (6, 6).")
        if not isinstance(self.num_boxes, int) or not 1 <= self.num_boxes <= (h - 2) * (w - 2) // 3:
            raise InvalidArgument(f"num_boxes={self.num_boxes!r} must be an int in [1, {(h - 2) * (w - 2) // 3}].")
        if not isinstance(self.num_gen_steps, int) or self.num_gen_steps < 1:
            raise InvalidArgument(f"num_gen_steps={self.num_gen_steps!r} must be a positive int (default 20).")
        if not isinstance(self.min_solution_length, int) or self.min_solution_length < 1:
            raise InvalidArgument(f"min_solution_length={self.min_solution_length!r} must be an int >= 1.")
        if not isinstance(self.max_solution_length, int) or self.max_solution_length < self.min_solution_length:
            raise InvalidArgument(
                f"max_solution_length={self.max_solution_length!r} must be an int >= min_solution_length="
                f"{self.min_solution_length}; raise the turn budget (max_turns x max_actions_per_turn) or lower "
                f"min_solution_length."
            )


@dataclass(frozen=True)
class Room:
    """A generated room that passed the filter: the seed that produced it, its shortest solution and its layout key
    (:func:`layout_key`)."""

    seed: int
    board: Board
    solution: tuple[str, ...]
    layout_key: str


@lru_cache(maxsize=65536)
def room_for_seed(seed: int, config: RoomConfig) -> Room | None:
    """The room that ``seed`` yields under ``config``, or ``None`` when the generator fails on that seed or the
    room's shortest solution is outside ``[min_solution_length, max_solution_length]``. Cached per (seed, config)."""
    try:
        board = generate_board(seed, config.dim, config.num_boxes, config.num_gen_steps)
    except (RuntimeError, RuntimeWarning):
        return None
    solution = shortest_solution(board, max_depth=config.max_solution_length)
    if solution is None or len(solution) < config.min_solution_length:
        return None
    return Room(seed, board, tuple(solution), layout_key(board))


def find_room(seed: int, config: RoomConfig, max_tries: int = 1000, split: str | None = None) -> Room:
    """The first room that passes the filter among seeds ``seed, seed + 1, ...`` (deterministic in ``seed``) and,
    when ``split`` is ``"train"`` or ``"test"``, whose layout falls on that side (:func:`layout_split`); ``None``
    takes rooms of either side (v1's draw). ``max_tries`` seeds are tried (times :data:`TEST_MODULUS` for one side)."""
    if split is not None and split not in SPLITS:
        raise InvalidArgument(f"split={split!r} is not a side of the held-out split; use one of {SPLITS}.")
    tries = max_tries if split is None else max_tries * TEST_MODULUS
    for k in range(tries):
        room = room_for_seed((seed + k) % (2**31), config)
        if room is not None and (split is None or layout_split(room.layout_key) == split):
            return room
    raise InvalidArgument(
        f"no room among seeds {seed}..{seed + tries - 1} passes the filter {config}"
        + (f" on the {split!r} side" if split else "")
        + "; loosen min/max_solution_length or change num_gen_steps."
    )
