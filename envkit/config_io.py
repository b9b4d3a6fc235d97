"""Configs to and from plain data: one generic loader for nested (frozen) dataclasses.

``dataclasses.asdict`` turns a config into JSON-able data; `from_data` is its inverse for any config built of
dataclasses, tuples, lists, dicts, ``Optional`` and ``Literal`` fields, so no config hand-writes a ``from_json``::

    >>> from envkit.credit.sero import SeroOptions
    >>> import dataclasses, json
    >>> opts = SeroOptions(roots_per_group=3)
    >>> from_data(SeroOptions, json.loads(json.dumps(dataclasses.asdict(opts)))) == opts
    True

Unknown keys are refused with their names (a config written by a newer version, or a typo), never dropped; a
value of the wrong type (a string for an int, a bool for a float, a choice outside a ``Literal``) is refused
with the field's dotted path and the type it needs, before the dataclass' own ``__post_init__`` checks run.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

__all__ = ["from_data"]

T = TypeVar("T")


def from_data(cls: type[T], data: Any) -> T:
    """Build the dataclass `cls` from `data` (a mapping, as ``dataclasses.asdict`` makes), nested fields included.

    Raises:
        TypeError: `data` is not a mapping, names fields `cls` does not have, or holds a value of the wrong type
            (the message names the field, e.g. ``BackendConfig.sero_opts.roots_per_group``, and what to write).
    """
    return typing.cast(T, _convert(cls, data, cls.__name__))


def _hints(tp: type) -> dict[str, Any]:
    """Field types, resolved; a field whose annotation names something only imported for type checking keeps its
    value as it comes (no nested conversion for it)."""
    try:
        return typing.get_type_hints(tp)
    except NameError:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(tp):
            try:
                out[f.name] = typing.get_type_hints(
                    type("_One", (), {"__annotations__": {f.name: f.type}, "__module__": tp.__module__})
                )[f.name]
            except NameError:
                out[f.name] = Any
        return out


def _refuse(where: str, want: str, value: Any) -> TypeError:
    return TypeError(f"{where}: expected {want}, got {type(value).__name__} {value!r}; write {want} there")


def _scalar(tp: Any, value: Any, where: str) -> Any:
    """`value` checked against a scalar type (int, float, str, bool, Literal); other types pass as they come."""
    if typing.get_origin(tp) is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices or type(value) not in {type(c) for c in choices}:
            raise _refuse(where, "one of " + ", ".join(repr(c) for c in choices), value)
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise _refuse(where, "true or false", value)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _refuse(where, "an integer", value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _refuse(where, "a number", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _refuse(where, "a string", value)
        return value
    return value


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if typing.get_origin(tp) is typing.Annotated:
        return _convert(typing.get_args(tp)[0], value, where)
    if value is None:
        optional = origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)
        if optional or tp is Any or tp is type(None):
            return None
        raise _refuse(where, _name(tp), value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object for {tp.__name__}, got {type(value).__name__}")
        hints = _hints(tp)
        fields = {f.name for f in dataclasses.fields(tp) if f.init}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise TypeError(f"{where}: {tp.__name__} has no field(s) {unknown}; known: {sorted(fields)}")
        return tp(**{k: _convert(hints[k], v, f"{where}.{k}") for k, v in value.items()})
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(options) == 1:
            return _convert(options[0], value, where)
        for option in options:  # the first that takes the value (int before float keeps an int an int)
            try:
                return _convert(option, value, where)
            except TypeError:
                continue
        raise _refuse(where, " or ".join(_name(a) for a in options), value)
    if origin in (tuple, list, dict) and not isinstance(value, dict if origin is dict else (list, tuple)):
        raise _refuse(where, "an object" if origin is dict else "a list", value)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if args:
            return tuple(_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
        return tuple(value)
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return [_convert(arg, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _, arg = typing.get_args(tp) or (Any, Any)
        return {k: _convert(arg, v, f"{where}[{k!r}]") for k, v in value.items()}
    return _scalar(tp, value, where)


def _name(tp: Any) -> str:
    """How a type reads in an error (``an integer``, ``one of 'a', 'b'``, ``an object for ReachConfig``)."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return f"an object for {tp.__name__}"
    if typing.get_origin(tp) is typing.Literal:
        return "one of " + ", ".join(repr(c) for c in typing.get_args(tp))
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))
