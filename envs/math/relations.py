"""Spelling-free relation rules for Math-v0: what the parsed answer states, and what the parser dropped.

The text rule (`envkit.envs.math.extract.relation_chains`) knows relations by their spelling, and every new
spelling (``\\therefore``, ``\\land``, ``\\operatorname{=}``, ``\\\\``, ``\\mathrm{31} = 30``, ``\\pi = 30``, ...)
used to earn the reward for 30 with ``31 REL 30``. The two rules here do not depend on how a relation is
spelled:

- `constant_sides_agree`: in the answer *as math-verify parsed it*, every equation (``Eq``, or a chain of them)
  whose sides are constants (no free symbols: ``31``, ``\\pi``, ``e``, ``\\sqrt{961}``) must have equal constant
  sides. math-verify itself compares only the last side against a reference that is not an equation.
- `dropped_values`: every number (and ``\\pi``, ``\\infty``) the answer writes must be read by the parser. The
  answer is parsed once more with each such value replaced by a symbol the answer cannot name (a single letter
  the answer does not contain anywhere; not a subscripted name or a braced group: latex2sympy takes seconds on
  those); a value whose symbol is missing from the parse was dropped (math-verify parses
  ``31 \\therefore 30`` as ``30``), and the answer is wrong -- unless the dropped value is the answer's own
  value (``30 \\iff 30``). Where that variant does not parse, each value is
  changed in turn instead (``31`` -> ``131``) and the parse must change. Not tracked: subscripts (``a_{10}``,
  ``\\log_2``) and exponents of units (``\\text{cm}^2``), which name rather than state a value.

Both run only for answers math-verify already found equal to the reference, in the worker under its timer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

#: Values an answer states: decimal numbers and the constants math-verify knows by name.
_VALUE_RE = re.compile(r"\d+(?:\.\d+)?|\.\d+|\\(?:pi|infty)(?![A-Za-z])")
#: Spans whose digits name something: subscripts, and exponents of a unit written as text.
_NAMING_RE = re.compile(
    r"_\s*\{[^{}]*\}|_\s*\\?[A-Za-z0-9]"
    r"|\\(?:text|textrm|mathrm|operatorname|mbox|hbox)\s*\{\s*[A-Za-z .]*\}\s*\^\s*(?:\{\s*-?\d+\s*\}|-?\d)"
)
#: A text or font wrapper around something with a digit: math-verify reads ``\mathrm{31}`` as 31.
_WRAPPED_VALUE_RE = re.compile(
    r"\\(?:text|textrm|textbf|textit|texttt|textsf|textup|textnormal|mathrm|mathbf|mathit|mathsf|mathtt|"
    r"mathnormal|mathbb|mathcal|mathfrak|boldsymbol|bm|operatorname|mbox|hbox)\s*\{([^{}]*\d[^{}]*)\}"
)
#: ``\frac12``, ``\sqrt2``, ``\binom52``: single-digit arguments without braces.
_BARE_ARG_RE = re.compile(r"(\\(?:[dt]?frac|[dt]?binom|sqrt)\s*)(\d)(\d?)")
MAX_PERTURBED = 24
#: What may surround a lone value without the answer saying anything else.
_BARE_REST_RE = re.compile(r"[\s$+\-{}()]+")


def _is_expr(obj: Any) -> bool:
    from sympy import Basic
    from sympy.matrices import MatrixBase

    return isinstance(obj, (Basic, MatrixBase))


def _eq_chain(expr: Any) -> list[Any] | None:
    """The sides of an equation or a chain of equations (``And`` of ``Eq``), else None."""
    from latex2sympy2_extended.logic import And
    from sympy import Eq

    if isinstance(expr, Eq):
        return [expr.lhs, expr.rhs]
    if isinstance(expr, And) and expr._unsorted_args and all(isinstance(a, Eq) for a in expr._unsorted_args):
        sides: list[Any] = []
        for a in expr._unsorted_args:
            sides.extend([a.lhs, a.rhs] if not sides or a.lhs != sides[-1] else [a.rhs])
        return sides
    return None


_NAME_DIGIT_RE = re.compile(r"_\{[^{}]*\}|_\w+")
_NUMBER_NAME_RE = re.compile(r"\s*-?(?:\d+(?:\.\d+)?|\.\d+)\s*")


def _as_value(side: Any) -> Any:
    """`side` as a value, or None if it is a label. A value has no free symbols except symbols whose names
    carry digits outside a subscript (``\\text{31}`` parses as the symbol ``31``, ``\\hat{31}`` as ``hat{31}``);
    a symbol named by a number is that number."""
    from sympy import Number, sympify

    free = getattr(side, "free_symbols", None)
    if free is None or not _is_expr(side):
        return None
    subs = {}
    for sym in free:
        name = _NAME_DIGIT_RE.sub("", str(sym))
        if not any(ch.isdigit() for ch in name):
            return None
        if _NUMBER_NAME_RE.fullmatch(name):
            subs[sym] = Number(sympify(name.strip()))
    return side.xreplace(subs) if subs else side


#: Names for the values of the symbolic parse: single lowercase letters that math-verify reads as plain symbols
#: (not ``e``, ``i``, ``d``, ``l``, ``o``), used only when the answer contains the letter nowhere.
_LETTERS = "abcfghjkmnpqrstuvwxyz"


def constant_sides_agree(parsed: Any, equal: Callable[[Any, Any], bool]) -> str:
    """``""`` if the value sides of every equation in `parsed` (math-verify's parse) agree, else why not."""
    if not parsed or not _is_expr(parsed[0]):
        return ""
    sides = _eq_chain(parsed[0])
    if sides is None:
        return ""
    values = [(s, v) for s in sides if (v := _as_value(s)) is not None]
    for s, v in values[:-1]:
        if not equal(values[-1][1], v):
            return f"the answer states {s!s:.60} = {values[-1][0]!s:.60}, which is false"
    return ""


def _prepare(answer: str) -> str:
    answer = _WRAPPED_VALUE_RE.sub(lambda m: "(" + m.group(1) + ")", answer)
    return _BARE_ARG_RE.sub(
        lambda m: m.group(1) + "{" + m.group(2) + "}" + ("{" + m.group(3) + "}" if m.group(3) else ""), answer
    )


def _values(answer: str) -> list[tuple[int, int]]:
    naming = [m.span() for m in _NAMING_RE.finditer(answer)]
    out, k = [], 0
    for m in _VALUE_RE.finditer(answer):
        while k < len(naming) and naming[k][1] <= m.start():
            k += 1
        if k < len(naming) and naming[k][0] <= m.start() < naming[k][1]:
            continue
        out.append(m.span())
    return out


def _replace(answer: str, spans: list[tuple[int, int]], new: Callable[[int, str], str]) -> str:
    parts, last = [], 0
    for i, (a, b) in enumerate(spans):
        parts += [answer[last:a], new(i, answer[a:b])]
        last = b
    parts.append(answer[last:])
    return "".join(parts)


def _restates(value: str, ref: Any, parse: Callable[[str], Any], equal: Callable[[Any, Any], bool]) -> bool:
    """Whether a dropped `value` is the answer's own value (``30 \\iff 30`` states nothing false)."""
    got = parse(value)
    return bool(ref and got and _is_expr(ref[0]) and _is_expr(got[0]) and equal(ref[0], got[0]))


def _same_with_values(
    sym_expr: Any,
    ref: Any,
    names: list[str],
    answer: str,
    spans: list[tuple[int, int]],
    by_name: dict[str, Any],
    equal: Callable[[Any, Any], bool],
) -> bool:
    """Whether the symbolic parse, with the values put back, is the parse of the answer itself."""
    from sympy import oo, pi, sympify

    subs = {}
    for n, (a, b) in zip(names, spans):
        text = answer[a:b]
        subs[by_name[n]] = pi if text == "\\pi" else oo if text == "\\infty" else sympify(text, rational=True)
    try:
        return str(sym_expr.xreplace(subs)) == str(ref) or equal(ref, sym_expr.xreplace(subs))
    except Exception:
        return False


def dropped_values(answer: str, parse: Callable[[str], Any], equal: Callable[[Any, Any], bool]) -> str:
    """``""`` if the parser reads every value `answer` writes (see the module docstring), else why not."""
    answer = _prepare(answer)
    spans = _values(answer)
    if not spans:
        return ""
    if len(spans) == 1 and not _BARE_REST_RE.sub("", answer[: spans[0][0]] + answer[spans[0][1] :]):
        return ""  # a lone number (``-4``, ``$30$``): nothing else for the parser to drop it for
    free = [c for c in _LETTERS if c not in answer.lower()]  # letters the answer never writes, in any form
    names = free[: len(spans)]
    variant = _replace(answer, spans, lambda i, _: f" {names[i]} ") if len(names) == len(spans) else ""
    parsed = parse(variant) if variant else None
    ref = parse(answer)
    if parsed and _is_expr(parsed[0]):
        by_name = {str(s): s for s in parsed[0].free_symbols}
        missing = [i for i, n in enumerate(names) if n not in by_name]
        bad = [i for i in missing if not _restates(answer[slice(*spans[i])], ref, parse, equal)]
        if bad:
            a, b = spans[bad[0]]
            return f"the parser ignores the value {answer[a:b]!r} in the answer (write the value alone)"
        if missing:
            return ""
        if ref and _is_expr(ref[0]) and _same_with_values(parsed[0], ref[0], names, answer, spans, by_name, equal):
            return ""
    # the symbolic variant does not parse (``10\\%``) or means something else with symbols than with numbers
    # (``31 \\cap 30``): change each value in turn; the parse must change
    if len(spans) > MAX_PERTURBED:
        return f"the answer writes {len(spans)} values, more than the {MAX_PERTURBED} the checker can account for"
    ref_s = str(ref[0]) if ref else ""
    for a, b in spans:
        changed = _replace(answer, [(a, b)], lambda _, s: "(" + s + "+1)" if s.startswith("\\") else "1" + s)
        got = parse(changed)
        if (not got or str(got[0]) == ref_s) and not _restates(answer[a:b], ref, parse, equal):
            return f"the parser ignores the value {answer[a:b]!r} in the answer (write the value alone)"
    return ""
