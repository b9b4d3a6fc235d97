"""What envkit's command lines share: tyro parsing with one-line errors, and KEY=VALUE / JSON / id-list options.

Every console script (``envkit-oracle``, ``envkit-train``, ``envkit-serve``) is built by tyro from its config
dataclasses, so ``--help`` shows each field's docstring and default once, as the dataclass declares it. `cli`
turns every way a command line can be wrong (an unknown option, a value of the wrong type, a dataclass's
``__post_init__`` check) into ONE line ``error: ...`` on stderr and exit code 2, never a traceback or a box.

A field ``env_kwargs: Annotated[dict[str, Any], key_values("--env-kwarg")]`` reads ``--env-kwarg max_steps=10
--env-kwarg name=x`` (repeatable) into ``{"max_steps": 10, "name": "x"}``:

    >>> parse_kwargs(["max_steps=10", "name=x"], "--env-kwarg")
    {'max_steps': 10, 'name': 'x'}
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import io
import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import tyro
from tyro.constructors import PrimitiveConstructorSpec

__all__ = ["cli", "fail", "id_list", "json_object", "key_values", "one_line", "parse_kwargs"]

T = TypeVar("T")


def _field_docs_as_paragraphs() -> None:
    """Let a field's multi-line attribute docstring read as one paragraph in ``--help``.

    The configs document each field in a docstring under it (grouped, as Gymnasium's ``EnvSpec`` is). tyro 1.0
    joins a help text's single line breaks only where the next line starts with a letter, and does so before it
    dedents an attribute docstring, so each indented continuation line kept its break. Dedenting first
    (`inspect.cleandoc`) gives the join the lines it expects; texts that were already flat are unchanged.
    """
    strings = getattr(getattr(tyro, "_strings", None), "remove_single_line_breaks", None)
    if strings is None or getattr(strings, "_envkit_dedents", False):
        return

    def joined(helptext: str) -> str:
        return strings(inspect.cleandoc(helptext) if "\n" in helptext else helptext)

    joined._envkit_dedents = True  # type: ignore[attr-defined]
    tyro._strings.remove_single_line_breaks = joined  # type: ignore[attr-defined]


_field_docs_as_paragraphs()
_BOX = re.compile(r"[╭╮╰╯│─┃━┏┓┗┛]+")
_ASCII_TITLE = re.compile(r"^\+-+ (.*?) -+\+$")
_ASCII_SIDES = re.compile(r"^\| ?(.*?) ?\|$")
_ASCII_RULE = re.compile(r"[-=+| ]*")


def parse_kwargs(items: Sequence[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` options (VALUE parsed as JSON when it can be, else kept as text) as a dict.

    Raises:
        ValueError: an item without ``=`` or without a key (the message names `flag`).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE (VALUE parsed as JSON when it can be), got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def key_values(flag: str) -> PrimitiveConstructorSpec:
    """A repeatable ``FLAG KEY=VALUE`` option that builds a dict (use as ``Annotated[dict[str, Any], ...]``)."""
    return PrimitiveConstructorSpec(
        nargs="*",
        metavar="KEY=VALUE",
        instance_from_str=lambda items: parse_kwargs(items, flag),
        is_instance=lambda x: isinstance(x, dict),
        str_from_instance=lambda d: [f"{k}={json.dumps(v)}" for k, v in d.items()],
        _action="append",
    )


def json_object(flag: str) -> PrimitiveConstructorSpec:
    """An option holding one JSON object, e.g. ``--env-kwargs '{"max_steps": 30}'``."""

    def parse(items: list[str]) -> dict[str, Any]:
        try:
            value = json.loads(items[0])
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError(f"{flag} {items[0]!r}: expected a JSON object, e.g. '{{\"max_steps\": 30}}'")
        return value

    return PrimitiveConstructorSpec(
        nargs=1,
        metavar="JSON",
        instance_from_str=parse,
        is_instance=lambda x: isinstance(x, dict),
        str_from_instance=lambda d: [json.dumps(d)],
    )


def id_list(flag: str) -> PrimitiveConstructorSpec:
    """An option holding comma-separated integers, e.g. ``--eden-anchors 17,42,99``."""

    def parse(items: list[str]) -> tuple[int, ...]:
        try:
            return tuple(int(t) for t in items[0].split(",") if t.strip())
        except ValueError as exc:
            raise ValueError(f"{flag} {items[0]!r}: expected comma-separated token ids, e.g. 17,42,99") from exc

    return PrimitiveConstructorSpec(
        nargs=1,
        metavar="ID,ID,...",
        instance_from_str=parse,
        is_instance=lambda x: isinstance(x, tuple),
        str_from_instance=lambda t: [",".join(str(i) for i in t)],
    )


def one_line(box: str) -> str:
    """tyro's boxed error message as one line (an unknown option reads "No such option: X (did you mean Y?)")."""
    lines = []
    for raw in box.splitlines():
        x = _BOX.sub(" ", raw).strip()
        x = _ASCII_TITLE.sub(r"\1", x)  # rich's ASCII fallback: "+- Title ---+", "| text |", "|-----|"
        x = _ASCII_SIDES.sub(r"\1", x).strip()
        if x and not _ASCII_RULE.fullmatch(x) and not x.startswith(("For full helptext", "usage:")):
            lines.append(x)
    if not lines:
        return "invalid command line (see --help)"
    title, body = lines[0], lines[1:]
    if title.startswith("Unrecognized options") or (body and body[0].startswith("Unrecognized options")):
        text = next(x for x in lines if x.startswith("Unrecognized options:"))
        flags = [t for t in text.partition(":")[2].replace(",", " ").split() if t.startswith("-")]
        msg = "No such option: " + (", ".join(flags) or text.partition(":")[2].strip())
        if "Perhaps you meant:" in lines:
            # tyro lists candidates that share a word (--task -> --chunk-tasks, --tasks); name the closest by
            # edit distance over the whole option name
            after = lines[lines.index("Perhaps you meant:") + 1 :]
            cands = list(dict.fromkeys(x.split()[0].rstrip(",") for x in after if x.startswith("-")))
            if cands:
                typed = flags[0] if flags else ""
                hint = max(cands, key=lambda c: difflib.SequenceMatcher(None, typed, c).ratio())
                msg += f" (did you mean {hint}?)"
        return msg
    if body and body[0].startswith("Error parsing"):
        where, _, why = body[0][len("Error parsing ") :].partition(": ")
        return body[0] if where.startswith("-") else why  # a config's own check names its setting itself
    rest = [x for x in body if not x.startswith(("Argument helptext:", "Perhaps you meant:"))]
    return f"{title}: {rest[0]}" if rest else title


def fail(*lines: str, prog: str | None = None) -> NoReturn:
    """Print each line as ``[prog: ]error: LINE`` on stderr and exit with code 2."""
    for line in lines:
        print(f"{prog + ': ' if prog else ''}error: {line}", file=sys.stderr)
    raise SystemExit(2)


def cli(
    f: Callable[..., T],
    *,
    args: Sequence[str],
    prog: str,
    description: str | None = None,
    default: Any = tyro.MISSING_NONPROP,
    config: Sequence[Any] = (),
    error_prefix: str | None = None,
) -> T:
    """``tyro.cli(f, args=args)`` with every command-line error as one line ``error: ...`` and exit code 2.

    ``--help`` prints the help and exits 0 as usual. A ``ValueError`` from a config's ``__post_init__`` (a bad
    value) and tyro's own errors (unknown option, wrong type, missing argument) become one line each.

    Args:
        f: The dataclass (or subcommand union / function) to build.
        args: The arguments (without the program name).
        prog: Program name shown in usage lines.
        description: Text above the options in ``--help`` (default: the dataclass docstring).
        default: A default instance (its values are the defaults ``--help`` shows).
        config: tyro markers applied to every field.
        error_prefix: Written before ``error:`` (e.g. the program name); None: nothing.
    """
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return tyro.cli(  # type: ignore[no-any-return]
                f, args=list(args), prog=prog, description=description, default=default, config=tuple(config)
            )
    except SystemExit as exc:
        if exc.code in (0, None):
            sys.stderr.write(err.getvalue())
            raise
        fail(one_line(err.getvalue()), prog=error_prefix)
    except ValueError as exc:
        fail(str(exc), prog=error_prefix)
