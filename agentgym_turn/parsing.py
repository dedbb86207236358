"""Parsing of an agent's turn: XML-like tags and JSON tool calls, tolerant or strict.

The agent's text is arbitrary model output. Nothing here raises on it: a parse either returns a value or a
:class:`ParseError` whose ``message`` is fit to show the agent after ``"Error: "``.

JSON comes in two modes (:data:`JSON_MODES`): ``"tolerant"`` accepts code fences, prose around the object, single
quotes and Python literals (what a chat model often writes); ``"strict"`` accepts only a valid JSON object,
optionally surrounded by whitespace, and nothing else (what "Tool calls must be valid JSON" asks for).

    >>> extract_tag("<reasoning>hi</reasoning><tool>{}</tool>", "tool")
    '{}'
    >>> parse_tool_call('{"name": "wiki_search", "args": {"query": "Gacy"}}')
    ToolCall(name='wiki_search', args={'query': 'Gacy'})
    >>> parse_tool_call("{'name': 'wiki_search', 'args': {'query': 'Gacy'}}", mode="strict").message
    'invalid JSON: expected one JSON object and nothing else (double quotes, no code fence, no prose around it).'
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

#: ``"tolerant"`` (fences, prose, Python literals pass) or ``"strict"`` (one valid JSON object, nothing else).
JSON_MODES: tuple[str, ...] = ("tolerant", "strict")
_STRICT_INVALID = (
    "invalid JSON: expected one JSON object and nothing else (double quotes, no code fence, no prose around it)."
)
_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*(.*?)\s*```\s*$", re.S)


@dataclass(frozen=True)
class ParseError:
    """Why a piece of agent text could not be parsed (shown to the agent as ``"Error: " + message``)."""

    message: str


@dataclass(frozen=True)
class ToolCall:
    """A parsed tool call: the tool's name and its arguments."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@lru_cache(maxsize=64)
def _tag_re(tag: str) -> re.Pattern[str]:
    t = re.escape(tag)
    return re.compile(rf"<{t}>(.*?)</{t}>", re.S)


def find_tags(text: str, tag: str) -> list[str]:
    """Contents of every ``<tag>...</tag>`` pair in ``text`` (non-greedy, in order)."""
    return _tag_re(tag).findall(text)


def extract_tag(text: str, tag: str, *, last: bool = False) -> str | None:
    """Content of the first (or ``last``) ``<tag>...</tag>`` pair, or ``None`` when there is none."""
    found = find_tags(text, tag)
    if not found:
        return None
    return found[-1] if last else found[0]


def count_tag(text: str, tag: str) -> tuple[int, int]:
    """How many opening ``<tag>`` and closing ``</tag>`` markers ``text`` holds."""
    return text.count(f"<{tag}>"), text.count(f"</{tag}>")


def _first_json_object(s: str) -> str | None:
    """The first balanced ``{...}`` substring of ``s`` (string-literal aware), or ``None``."""
    start = s.find("{")
    while start != -1:
        depth, in_str, esc, quote = 0, False, False, ""
        for i in range(start, len(s)):
            c = s[i]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == quote:
                    in_str = False
            elif c in "\"'":
                in_str, quote = True, c
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return s[start : i + 1]
        start = s.find("{", start + 1)
    return None


def parse_json_object(s: str, *, max_chars: int = 100_000, mode: str = "tolerant") -> dict[str, Any] | ParseError:
    """Parse a JSON object; ``mode="tolerant"`` lets code fences, surrounding prose, single quotes and Python
    literals pass, ``mode="strict"`` only a valid JSON object (surrounding whitespace allowed) and nothing else.

    Returns the dict, or a :class:`ParseError` saying what was wrong.
    """
    if mode not in JSON_MODES:
        raise ValueError(f"mode={mode!r}; use one of {JSON_MODES}.")
    if len(s) > max_chars:
        return ParseError(f"the JSON is {len(s)} characters long; at most {max_chars} are accepted.")
    if mode == "strict":
        if not s.strip():
            return ParseError("expected a JSON object, got nothing.")
        try:
            value = json.loads(s)
        except (json.JSONDecodeError, RecursionError):
            return ParseError(_STRICT_INVALID)
        return value if isinstance(value, dict) else ParseError(f"expected a JSON object, got {type(value).__name__}.")
    fenced = _FENCE.match(s)
    body = (fenced.group(1) if fenced else s).strip()
    if not body:
        return ParseError("expected a JSON object, got nothing.")
    for cand in (body, None):
        if cand is None:  # the text around an object is not JSON: try the first balanced {...} inside it
            cand = _first_json_object(body)
            if cand is None or cand == body:
                break
        try:
            value = json.loads(cand)
        except (json.JSONDecodeError, RecursionError):
            try:
                value = ast.literal_eval(cand)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
        if isinstance(value, dict):
            return value
        return ParseError(f"expected a JSON object, got {type(value).__name__}.")
    return ParseError("invalid JSON: could not parse an object from the text.")


def parse_tool_call(
    body: str, *, args_keys: tuple[str, ...] = ("args", "arguments"), mode: str = "tolerant"
) -> ToolCall | ParseError:
    """Parse ``{"name": ..., "args": {...}}`` (or ``"arguments"``) into a :class:`ToolCall`.

    ``mode`` is :func:`parse_json_object`'s. Arguments given as a JSON-encoded string (as OpenAI-style models often
    do) are decoded with the same mode.
    """
    obj = parse_json_object(body, mode=mode)
    if isinstance(obj, ParseError):
        return obj
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError('the tool call needs a "name" string, e.g. {"name": "...", "args": {...}}.')
    present = [k for k in args_keys if k in obj]
    if len(present) > 1:
        return ParseError(f"the tool call gives both {present[0]!r} and {present[1]!r}; use one.")
    extra = sorted(set(obj) - {"name", *args_keys})
    if extra:
        return ParseError(f"the tool call has unexpected keys {extra}; it takes only 'name' and '{args_keys[0]}'.")
    args: Any = obj[present[0]] if present else {}
    if isinstance(args, str):
        parsed = parse_json_object(args, mode=mode) if args.strip() else {}
        if isinstance(parsed, ParseError):
            return ParseError(f'"{present[0]}" must be an object; {parsed.message}')
        args = parsed
    if not isinstance(args, dict):
        return ParseError(f'"{present[0] if present else args_keys[0]}" must be an object, got {type(args).__name__}.')
    return ToolCall(name=name.strip(), args=args)
