"""Tag and tool-call parsing: tolerant of model output, never raising on it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym_turn.parsing import (
    ParseError,
    ToolCall,
    count_tag,
    extract_tag,
    find_tags,
    parse_json_object,
    parse_tool_call,
)


@pytest.mark.parametrize(
    ("text", "tag", "first", "last"),
    [
        ("<a>1</a><a>2</a>", "a", "1", "2"),
        ("<a>\n multi\nline </a>", "a", "\n multi\nline ", "\n multi\nline "),
        ("<a>unclosed", "a", None, None),
        ("</a>reversed<a>", "a", None, None),
        ("<a><a>x</a>", "a", "<a>x", "<a>x"),
        ("<b>x</b>", "a", None, None),
    ],
)
def test_extract_tag(text, tag, first, last):
    assert extract_tag(text, tag) == first
    assert extract_tag(text, tag, last=True) == last


def test_find_and_count():
    assert find_tags("<t>1</t> <t>2</t>", "t") == ["1", "2"]
    assert count_tag("<t><t></t>", "t") == (2, 1)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"name": "wiki_search", "args": {"query": "Gacy"}}', ToolCall("wiki_search", {"query": "Gacy"})),
        ('```json\n{"name": "f", "arguments": {"x": 1}}\n```', ToolCall("f", {"x": 1})),
        ("{'name': 'f', 'args': {'q': 'single quotes'}}", ToolCall("f", {"q": "single quotes"})),
        ('Sure! {"name": "f", "args": {}} hope that helps', ToolCall("f", {})),
        ('{"name": "f", "arguments": "{\\"x\\": 2}"}', ToolCall("f", {"x": 2})),
        ('{"name": " f "}', ToolCall("f", {})),
    ],
)
def test_parse_tool_call_accepts(body, expected):
    assert parse_tool_call(body) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "got nothing"),
        ("not json", "invalid JSON"),
        ("[1, 2]", "got list"),
        ('{"args": {}}', '"name"'),
        ('{"name": "f", "args": [1]}', "must be an object"),
        ('{"name": "f", "args": {}, "arguments": {}}', "both"),
        ('{"name": "f", "args": {}, "extra": 1}', "unexpected keys"),
        ('{"name": "f", "args": "{broken"}', "must be an object"),
    ],
)
def test_parse_tool_call_rejects_with_a_message(body, message):
    out = parse_tool_call(body)
    assert isinstance(out, ParseError) and message in out.message


@pytest.mark.parametrize(
    "body",
    [
        "{'name': 'f', 'args': {'q': 'single quotes'}}",  # a Python-literal dict
        '```json\n{"name": "f", "args": {}}\n```',  # a fenced block
        'Sure! {"name": "f", "args": {}} hope that helps',  # prose around the object
        'Call: {"name": "f", "args": {}}',
        '{"name": "f", "args": {}}}',  # trailing garbage
        '{"name": "f", "arguments": "{\'x\': 2}"}',  # string arguments that are not JSON
    ],
)
def test_strict_mode_accepts_only_a_json_object(body):
    assert isinstance(parse_tool_call(body), ToolCall)  # the tolerant default reads all of them
    out = parse_tool_call(body, mode="strict")
    assert isinstance(out, ParseError) and "invalid JSON" in out.message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"name": "wiki_search", "args": {"query": "Gacy"}}', ToolCall("wiki_search", {"query": "Gacy"})),
        ('\n  {"name": "f", "args": {}}  \n', ToolCall("f", {})),  # whitespace around the object is not text
        ('{"name": "f", "arguments": "{\\"x\\": 2}"}', ToolCall("f", {"x": 2})),
    ],
)
def test_strict_mode_reads_valid_json(body, expected):
    assert parse_tool_call(body, mode="strict") == expected


def test_unknown_json_mode_is_a_programming_error():
    with pytest.raises(ValueError, match="mode='lenient'"):
        parse_json_object("{}", mode="lenient")


def test_parse_json_object_refuses_huge_input():
    out = parse_json_object("{" + " " * 200_000 + "}")
    assert isinstance(out, ParseError) and "at most" in out.message


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parsers_never_raise(text):
    out = parse_tool_call(text)
    assert isinstance(out, ToolCall | ParseError)
    assert isinstance(parse_tool_call(text, mode="strict"), ToolCall | ParseError)
    extract_tag(text, "tool")
    parse_json_object("{" + text)
    parse_json_object(text + "}")
