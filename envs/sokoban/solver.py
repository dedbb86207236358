"""Breadth-first searches: the shortest Sokoban solution (the oracle and the room filter) and the shortest walk.

    >>> from envs.sokoban.board import parse_board
    >>> shortest_solution(parse_board(["######", "#PX_O#", "######"]))
    ['Right', 'Right']
    >>> walk_distance(parse_board(["#######", "#P__XO#", "#######"]), (1, 1), (1, 3))
    2

The search state is (player position, box positions); moves use :func:`envs.sokoban.board.apply_move`, the same
dynamics the env plays. A 6x6 room with one box has at most a few hundred states: a full search takes milliseconds.
"""

from __future__ import annotations

from collections import deque

from envs.sokoban.board import DIRECTIONS, Board, Pos, apply_move


def shortest_solution(board: Board, max_depth: int | None = None) -> list[str] | None:
    """The shortest action sequence that puts every box on a target (``[]`` if already solved), or ``None`` when
    there is none within ``max_depth`` actions (``None`` = unbounded)."""
    if board.solved:
        return []
    start: tuple[Pos, frozenset[Pos]] = (board.player, board.boxes)
    parent: dict[tuple[Pos, frozenset[Pos]], tuple[tuple[Pos, frozenset[Pos]], str] | None] = {start: None}
    frontier: deque[tuple[Board, int]] = deque([(board, 0)])
    while frontier:
        current, depth = frontier.popleft()
        if max_depth is not None and depth >= max_depth:
            continue
        key = (current.player, current.boxes)
        for direction in DIRECTIONS:
            result = apply_move(current, direction)
            if not result.moved:
                continue
            nxt = result.board
            nkey = (nxt.player, nxt.boxes)
            if nkey in parent:
                continue
            parent[nkey] = (key, direction)
            if nxt.solved:
                path = []
                node: tuple[Pos, frozenset[Pos]] | None = nkey
                while parent[node] is not None:  # type: ignore[index]
                    node, step = parent[node]  # type: ignore[misc, index]
                    path.append(step)
                return path[::-1]
            frontier.append((nxt, depth + 1))
    return None


def first_move_costs(board: Board, max_depth: int | None = None) -> dict[str, int | None]:
    """For each action that changes the state, the length of the shortest solution that starts with it (``None``
    when no solution of at most ``max_depth`` actions starts with it: a dead end or too long). Actions that change
    nothing (into a wall, a blocked push) are left out.

        >>> from envs.sokoban.board import parse_board
        >>> first_move_costs(parse_board(["#####", "#___#", "#_X_#", "#_P_#", "#_O_#", "#####"]))
        {'Up': None, 'Down': 8, 'Left': 6, 'Right': 6}
    """
    costs: dict[str, int | None] = {}
    for direction in DIRECTIONS:
        result = apply_move(board, direction)
        if not result.moved:
            continue
        rest = shortest_solution(result.board, None if max_depth is None else max_depth - 1)
        costs[direction] = None if rest is None else 1 + len(rest)
    return costs


def walk_distance(board: Board, start: Pos, goal: Pos) -> int | None:
    """The fewest steps the player needs to walk from ``start`` to ``goal`` with the boxes where they are on
    ``board`` (walls, boxes and cells outside the grid block the way), or ``None`` when ``goal`` is unreachable."""
    if start == goal:
        return 0
    seen = {start}
    frontier: deque[tuple[Pos, int]] = deque([(start, 0)])
    while frontier:
        (r, c), dist = frontier.popleft()
        for dr, dc in DIRECTIONS.values():
            nxt = (r + dr, c + dc)
            if nxt in seen or board.blocked(nxt) or nxt in board.boxes:
                continue
            if nxt == goal:
                return dist + 1
            seen.add(nxt)
            frontier.append((nxt, dist + 1))
    return None
