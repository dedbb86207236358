"""Flat, typed trainer configs whose fields carry their help text, and the argparse parser generated from them.

A field is declared with :func:`arg`: ``lr: float = arg(1e-5, "policy learning rate")``. :func:`parse_config`
builds ``--lr`` (underscores become dashes; ``bool`` fields get ``--flag/--no-flag``; ``list`` fields take several
values, and a list whose default is empty also collects repeats: ``--env-kwarg a=1 --env-kwarg b=2``) and
constructs the dataclass, whose ``__post_init__`` validates every value.

:func:`env_kwargs_by_id` reads the trainers' ``--env-kwarg`` syntax (:data:`ENV_KWARG_HELP`).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

from agentgym_turn.error import InvalidArgument

T = TypeVar("T")

ENV_KWARG_HELP = (
    "gym.make kwargs as key=value (the value parsed as JSON, else kept as text) for every --env, or ENV_ID:key=value "
    "for one of several --env ids (later items win); repeatable. E.g. --env-kwarg split=validation top_k=3 "
    "TurnRL/TauRetail-v1:judge=http://127.0.0.1:8000/v1#Qwen/Qwen2.5-7B-Instruct"
)


def arg(default: Any, help: str, *, choices: Sequence[Any] | None = None) -> Any:
    """A dataclass field with a default (lists are copied per instance) and its CLI help text."""
    meta = {"help": help, "choices": choices}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _base_type(tp: Any) -> tuple[Any, bool, bool]:
    """(element type, is_list, is_optional) of a resolved annotation."""
    optional = False
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        tp = args[0]
        origin = typing.get_origin(tp)
    if origin is list:
        return typing.get_args(tp)[0], True, optional
    return tp, False, optional


def build_parser(cls: type, *, prog: str, description: str, defaults: dict[str, Any] | None = None) -> Any:
    """An ``argparse`` parser with one option per field of dataclass ``cls`` (``defaults`` override field defaults)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    hints = typing.get_type_hints(cls)
    defaults = defaults or {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp, is_list, optional = _base_type(hints[f.name])
        if f.name in defaults:
            default = defaults[f.name]
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = f.default_factory()  # type: ignore[misc]
        flag = "--" + f.name.replace("_", "-")
        kwargs: dict[str, Any] = {"default": default, "help": f.metadata.get("help", ""), "dest": f.name}
        if tp is bool and not is_list:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _parse_optional(tp) if optional else tp
            if is_list:
                kwargs["nargs"] = "+"
                if default == []:  # nothing to extend by mistake: repeats add up
                    kwargs["action"] = "extend"
            if f.metadata.get("choices"):
                kwargs["choices"] = f.metadata["choices"]
            kwargs["metavar"] = f.name.upper()
        parser.add_argument(flag, **kwargs)
    return parser


def _parse_optional(tp: Any) -> Any:
    def parse(text: str) -> Any:
        return None if text.lower() in ("none", "") else tp(text)

    parse.__name__ = getattr(tp, "__name__", "value")
    return parse


def parse_config(
    cls: type[T], argv: Sequence[str] | None, *, prog: str, description: str, defaults: dict[str, Any] | None = None
) -> T:
    """Parse ``argv`` into ``cls``; a validation error exits with the message (usage error, status 2)."""
    parser = build_parser(cls, prog=prog, description=description, defaults=defaults)
    ns = parser.parse_args(argv)
    try:
        return cls(**vars(ns))
    except InvalidArgument as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def config_argv(cfg: Any) -> list[str]:
    """The command-line flags that give ``cfg`` (a config dataclass) from its defaults, the inverse of
    :func:`build_parser`: one flag per field whose value differs from the field's default, in field order.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class C:
    ...     steps: int = arg(8, "steps")
    ...     env: list[str] = arg(["A"], "envs")  # noqa: RUF009
    ...     bf16: bool = arg(True, "bf16")
    >>> config_argv(C(steps=2, env=["A", "B"], bf16=False))
    ['--steps', '2', '--env', 'A', 'B', '--no-bf16']
    """
    argv: list[str] = []
    for f in dataclasses.fields(cfg):
        if not f.init:
            continue
        value = getattr(cfg, f.name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if value == default:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif value is None:
            argv += [flag, "none"]
        elif isinstance(value, list):
            argv += [flag, *map(str, value)] if value else []
        else:
            argv += [flag, str(value)]
    return argv


def env_kwargs_by_id(env_ids: Sequence[str], items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--env-kwarg`` items -> ``gym.make`` kwargs per env id, in the order given (later items win).

    ``key=value`` applies to every id of ``env_ids``; ``ENV_ID:key=value`` to that id only (as given to ``--env``,
    or without its ``module:`` prefix). Values are JSON when they parse (``top_k=3``, ``judge={"model": "m"}``,
    ``flag=true``), else text (``split=validation``): :func:`trainers.evaluation.parse_env_kwargs`.
    ``env_kwargs_by_id(["TurnRL/A-v0", "TurnRL/B-v0"], ["k=1", "TurnRL/B-v0:k=2"])`` ->
    ``{"TurnRL/A-v0": {"k": 1}, "TurnRL/B-v0": {"k": 2}}``.
    """
    from trainers.evaluation import parse_env_kwargs

    out: dict[str, dict[str, Any]] = {e: {} for e in env_ids}
    for item in items:
        head, sep, value = item.partition("=")
        target, _, key = head.rpartition(":")
        if not sep or not key.strip().isidentifier():
            raise InvalidArgument(
                f"--env-kwarg {item!r} must be key=value with a Python name as key, or ENV_ID:key=value for one "
                "--env, e.g. split=validation, top_k=3 or TurnRL/SearchR1-v1:top_k=3."
            )
        ids = [e for e in env_ids if target in (e, e.rpartition(":")[2])] if target else list(env_ids)
        if not ids:
            raise InvalidArgument(
                f"--env-kwarg {item!r} names {target!r}, which is not an --env ({', '.join(env_ids)}); put one of "
                f"them before the colon, e.g. {env_ids[0]}:{key.strip()}=..., or drop the prefix for every --env."
            )
        parsed = parse_env_kwargs([f"{key.strip()}={value}"])
        for e in ids:
            out[e].update(parsed)
    return out


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as a JSON-ready dict."""
    return dataclasses.asdict(cfg)
