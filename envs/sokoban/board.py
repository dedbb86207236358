"""Sokoban boards: the text form shown to the agent and the move/push dynamics (the env, the solver and the room filter
all play these).

A board is written one row per line with these symbols (the form the agent sees and the form a task stores)::

    >>> board = parse_board(["######", "#PX_O#", "######"])
    >>> after = apply_move(board, "Right")
    >>> render_board(after.board), after.moved, after.pushed_onto_target
    ('######\\n#_PXO#\\n######', True, False)
    >>> apply_move(after.board, "Right").board.solved
    True

``#`` wall, ``_`` floor, ``O`` empty target, ``X`` box, ``√`` box on a target, ``P`` player, ``S`` player on a
target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentgym_turn.error import InvalidTask

Direction = Literal["Up", "Down", "Left", "Right"]
Pos = tuple[int, int]

#: The four actions, in the order gym-sokoban lists them, and the (row, column) change each one makes.
DIRECTIONS: dict[str, Pos] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "X", "√", "P", "S"
SYMBOLS = (WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET)


@dataclass(frozen=True)
class Board:
    """An immutable Sokoban state: the fixed layout (walls, targets) and the movable parts (boxes, player).

    Cells outside the ``height`` x ``width`` grid count as walls.
    """

    height: int
    width: int
    walls: frozenset[Pos]
    targets: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos

    @property
    def boxes_on_target(self) -> int:
        """How many boxes stand on a target."""
        return len(self.boxes & self.targets)

    @property
    def solved(self) -> bool:
        """Every box is on a target."""
        return self.boxes <= self.targets

    def blocked(self, pos: Pos) -> bool:
        """``pos`` is a wall or outside the grid."""
        r, c = pos
        return pos in self.walls or not (0 <= r < self.height and 0 <= c < self.width)


@dataclass(frozen=True)
class MoveResult:
    """What one action did: the new board, whether the state changed, whether a box moved onto a target."""

    board: Board
    moved: bool
    pushed_box: bool
    pushed_onto_target: bool


def apply_move(board: Board, direction: str) -> MoveResult:
    """Play one action. The player steps into floor or a target; a box ahead is pushed when the cell behind it is
    free (not a wall, not another box, inside the grid); otherwise nothing changes (a no-op, not an error)."""
    dr, dc = DIRECTIONS[direction]
    r, c = board.player
    ahead = (r + dr, c + dc)
    if board.blocked(ahead):
        return MoveResult(board, False, False, False)
    if ahead not in board.boxes:
        return MoveResult(_replace(board, player=ahead), True, False, False)
    beyond = (ahead[0] + dr, ahead[1] + dc)
    if board.blocked(beyond) or beyond in board.boxes:
        return MoveResult(board, False, False, False)
    boxes = (board.boxes - {ahead}) | {beyond}
    onto = beyond in board.targets and ahead not in board.targets
    return MoveResult(_replace(board, player=ahead, boxes=frozenset(boxes)), True, True, onto)


def _replace(board: Board, *, player: Pos, boxes: frozenset[Pos] | None = None) -> Board:
    return Board(board.height, board.width, board.walls, board.targets, board.boxes if boxes is None else boxes, player)


def render_board(board: Board) -> str:
    """The board as text, one row per line (see the module docstring for the symbols)."""
    rows = []
    for r in range(board.height):
        row = []
        for c in range(board.width):
            p = (r, c)
            on_target = p in board.targets
            if p in board.walls:
                row.append(WALL)
            elif p == board.player:
                row.append(PLAYER_ON_TARGET if on_target else PLAYER)
            elif p in board.boxes:
                row.append(BOX_ON_TARGET if on_target else BOX)
            else:
                row.append(TARGET if on_target else FLOOR)
        rows.append("".join(row))
    return "\n".join(rows)


def board_rows(board: Board) -> list[str]:
    """The board as a list of row strings (the JSON-friendly form a task stores)."""
    return render_board(board).split("\n")


def parse_board(rows: list[str] | tuple[str, ...] | str) -> Board:
    """Read a board from row strings (or one newline-separated string); raise ``InvalidTask`` naming the problem.

    The board must be rectangular, use only the documented symbols, hold exactly one player, at least one box and
    as many targets as boxes.
    """
    if isinstance(rows, str):
        rows = rows.strip("\n").split("\n")
    if not isinstance(rows, list | tuple) or not rows or not all(isinstance(r, str) for r in rows):
        raise InvalidTask(f"a Sokoban room is a non-empty list of row strings, got {rows!r:.120}.")
    width = len(rows[0])
    if width == 0 or any(len(r) != width for r in rows):
        raise InvalidTask(f"the room's rows must all have the same non-zero length, got {[len(r) for r in rows]}.")
    walls, targets, boxes, players = set(), set(), set(), []
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            p = (r, c)
            if ch not in SYMBOLS:
                raise InvalidTask(f"unknown symbol {ch!r} at row {r}, column {c}; use one of {''.join(SYMBOLS)}.")
            if ch == WALL:
                walls.add(p)
            if ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                targets.add(p)
            if ch in (BOX, BOX_ON_TARGET):
                boxes.add(p)
            if ch in (PLAYER, PLAYER_ON_TARGET):
                players.append(p)
    if len(players) != 1:
        raise InvalidTask(f"the room needs exactly one player ('P' or 'S'), found {len(players)}.")
    if not boxes or len(boxes) != len(targets):
        raise InvalidTask(
            f"the room needs at least one box and as many targets as boxes, found {len(boxes)} box(es) and "
            f"{len(targets)} target(s)."
        )
    return Board(len(rows), width, frozenset(walls), frozenset(targets), frozenset(boxes), players[0])
