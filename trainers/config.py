"""Typed trainer configs whose fields carry their help text, and the argparse parser generated from them.

A field is declared with :func:`arg`: ``lr: float = arg(1e-5, "policy learning rate")``. :func:`parse_config`
builds ``--lr`` (underscores become dashes; ``bool`` fields get ``--flag/--no-flag``; ``list`` fields take several
values, and a list whose default is empty also collects repeats: ``--env-kwarg a=1 --env-kwarg b=2``) and
constructs the dataclass, whose ``__post_init__`` validates every value.

A field declared with :func:`nested` holds another config dataclass (``RLConfig.credit_cfg``, a
``trainers.credit.CreditConfig``): its :func:`arg` fields are flags of the outer config, each under its own name or
the ``flag=`` name its :func:`arg` gives (``eps`` is ``--group-std-eps``); its plain fields keep their defaults.
:func:`options` lists the flat names, :func:`from_flat` builds a config from them (a saved ``config.json``), and
:func:`to_dict` writes them, so the flags, the saved configs and the experiment specs stay flat.

:func:`env_kwargs_by_id` reads the trainers' ``--env-kwarg`` syntax (:data:`ENV_KWARG_HELP`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from agentgym_turn.error import InvalidArgument

T = TypeVar("T")

ENV_KWARG_HELP = (
    "gym.make kwargs as key=value (the value parsed as JSON, else kept as text) for every --env, or ENV_ID:key=value "
    "for one of several --env ids (later items win); repeatable. E.g. --env-kwarg split=validation top_k=3 "
    "TurnRL/TauRetail-v1:judge=http://127.0.0.1:8000/v1#Qwen/Qwen2.5-7B-Instruct"
)


def arg(default: Any, help: str, *, choices: Sequence[Any] | None = None, flag: str | None = None) -> Any:
    """A dataclass field with a default (lists are copied per instance) and its CLI help text. ``flag``: the
    field's flat name (the flag without dashes) where it differs from the field's own, for a :func:`nested` config's
    fields (``eps: float = arg(1e-4, "...", flag="group_std_eps")``)."""
    meta = {"help": help, "choices": choices, "flag": flag}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def nested(cls: type) -> Any:
    """A field holding config dataclass ``cls`` (default ``cls()``), whose :func:`arg` fields are flags of the outer
    config (see the module docstring)."""
    return dataclasses.field(default_factory=cls, metadata={"nested": True})


@dataclasses.dataclass(frozen=True)
class Option:
    """One flag of a config class: its flat ``name`` (``--name`` with dashes; the key of :func:`to_dict`), the
    attribute ``path`` from the outer config (``("credit_cfg", "eps")``), the field and its resolved type."""

    name: str
    path: tuple[str, ...]
    field: dataclasses.Field
    hint: Any

    def default(self, defaults: Mapping[str, Any] | None = None) -> Any:
        """The field's default (``defaults`` by flat name override it)."""
        if defaults and self.name in defaults:
            return defaults[self.name]
        if self.field.default is not dataclasses.MISSING:
            return self.field.default
        return self.field.default_factory()  # type: ignore[misc]


def _is_nested(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get("nested"))


def options(cls: type, _path: tuple[str, ...] = ()) -> list[Option]:
    """The flags of config class ``cls`` in field order, :func:`nested` configs flattened in place; their names are
    unique (a clash is a programming error and raises ``TypeError``)."""
    hints = typing.get_type_hints(cls)
    out: list[Option] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if _is_nested(f):
            out += options(hints[f.name], (*_path, f.name))
        elif not _path or "help" in f.metadata:  # a nested config's plain fields are no flags
            out.append(Option(f.metadata.get("flag") or f.name, (*_path, f.name), f, hints[f.name]))
    if not _path:
        names = [o.name for o in out]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash:
            raise TypeError(f"{cls.__name__}: flags {clash} are declared twice; give one a flag= name.")
    return out


def from_flat(cls: type[T], values: Mapping[str, Any]) -> T:
    """``cls`` from its flat option values (:func:`options`' names; missing ones take their defaults), the inverse
    of :func:`to_dict`: a :func:`nested` config is built from its flags' values (or passed whole under its field
    name, e.g. ``credit_cfg=CreditConfig(...)``, then none of its flags may be given). A name that is no option
    raises ``TypeError``, as the dataclass itself does."""
    values = dict(values)
    kwargs = _take_kwargs(cls, values, nested_level=False)
    if values:
        raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {next(iter(values))!r}")
    return cls(**kwargs)


def _take_kwargs(cls: type, values: dict[str, Any], *, nested_level: bool) -> dict[str, Any]:
    """``cls``'s constructor kwargs, popped from flat ``values`` as :func:`options` names them."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if _is_nested(f):
            sub = _take_kwargs(hints[f.name], values, nested_level=True)
            if f.name in values:
                if sub:
                    raise TypeError(f"{cls.__name__}: pass {f.name}= or its flags {sorted(sub)}, not both.")
                kwargs[f.name] = values.pop(f.name)
            elif sub:
                kwargs[f.name] = hints[f.name](**sub)
        elif not nested_level or "help" in f.metadata:  # as options(): a nested config's plain fields are no flags
            key = f.metadata.get("flag") or f.name
            if key in values:
                kwargs[f.name] = values.pop(key)
    return kwargs


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
    """An ``argparse`` parser with one option per flag of dataclass ``cls`` (:func:`options`; ``defaults`` by flat
    name override field defaults)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    for opt in options(cls):
        f = opt.field
        tp, is_list, optional = _base_type(opt.hint)
        default = opt.default(defaults)
        flag = "--" + opt.name.replace("_", "-")
        kwargs: dict[str, Any] = {"default": default, "help": f.metadata.get("help", ""), "dest": opt.name}
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
            kwargs["metavar"] = opt.name.upper()
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
        return from_flat(cls, vars(ns))
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
    changed = {
        opt.name: value
        for opt, value in flat_items(cfg)  # nested configs' flags in place
        if value != opt.default() and not (isinstance(value, list | tuple) and not value)  # no flag takes none
    }
    return render_flags(changed)


def render_flags(values: Mapping[str, Any]) -> list[str]:
    """The command-line flags of ``values`` (flat field name -> value), as :func:`build_parser` reads them, in the
    mapping's order: ``--name value`` (underscores become dashes), a bool as ``--name`` or ``--no-name``, ``None``
    as ``none``, a list or tuple as the flag and its items (an empty one as the bare flag). The one renderer of
    trainer flags: :func:`config_argv` (a config's changes from its defaults) and the experiment runner
    (``leaderboards.runner``, a spec's values) both use it.

    >>> render_flags({"tasks_per_step": 4, "tree": True, "bf16": False, "env": ("a", "b"), "value_clip": None})
    ['--tasks-per-step', '4', '--tree', '--no-bf16', '--env', 'a', 'b', '--value-clip', 'none']
    """
    argv: list[str] = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list | tuple):
            argv += [flag, *map(str, value)]
        elif value is None:
            argv += [flag, "none"]
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
                "--env, e.g. split=validation, top_k=3 or TurnRL/SearchR1-v2:top_k=3."
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


def flat_items(cfg: Any) -> list[tuple[Option, Any]]:
    """``(option, value)`` of every flag of config ``cfg`` (:func:`options`), in field order."""
    return [(opt, functools.reduce(getattr, opt.path, cfg)) for opt in options(type(cfg))]


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as a JSON-ready dict, flat (a :func:`nested` config's values under their flag names, as
    :func:`from_flat` reads them back and as configs were saved before configs nested)."""
    return {opt.name: copy.deepcopy(value) for opt, value in flat_items(cfg)}
