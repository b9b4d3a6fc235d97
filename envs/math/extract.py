"""Answer extraction: find the final answer in a model's response (pure Python, no dependencies).

Methods (tried in the order given; the first that finds something wins):

- ``"boxed"``: the content of the LAST ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces), as in MATH / DAPO.
- ``"answer_is"``: the text after the last "the (final) answer is" / "Answer:" up to the end of the line or
  sentence (``$`` delimiters and a trailing period removed).
- ``"hashes"``: the text after the last GSM8K-style ``#### `` marker.
- ``"last_number"``: the last number in the text (``-1,234.5`` -> ``-1234.5``; ``3/4`` kept as a fraction).

Example:
    >>> extract_answer("so $x=2$ and the answer is \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_answer("The answer is 42.", methods=("answer_is",))
    '42'
    >>> extract_answer("3 apples + 4 = 7 apples", methods=("last_number",))
    '7'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

METHODS = ("boxed", "answer_is", "hashes", "last_number")
DEFAULT_METHODS = ("boxed", "answer_is", "hashes", "last_number")

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS_RE = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|final\s+answer\s*:|answer\s*:)\s*", re.IGNORECASE)
_HASHES_RE = re.compile(r"####\s*")
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?|(?<![\w.])-?\.\d+")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, or None."""
    starts = [m.end() for m in _BOX_RE.finditer(text)]
    for start in reversed(starts):
        depth = 1
        i = start
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text):  # skip escaped characters such as \{ and \}
                i += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    content = text[start:i].strip()
                    if content:
                        return content
                    break
            i += 1
    return None


def _after_marker(text: str, pattern: re.Pattern[str]) -> str | None:
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    tail = text[matches[-1].end() :]
    line = tail.split("\n", 1)[0].strip()
    # Cut at the end of the sentence: a period followed by a space or the end, but not a decimal point.
    line = re.split(r"\.(?=\s|$)", line, maxsplit=1)[0].strip()
    boxed = last_boxed(line)
    if boxed is not None:
        return boxed
    line = line.strip("$ ").strip()
    line = re.sub(r"^\\\(|\\\)$", "", line).strip()
    line = line.rstrip(".").strip()
    return line or None


def last_number(text: str) -> str | None:
    """The last number in `text`, without thousands separators (``"1,234"`` -> ``"1234"``), or None."""
    matches = _NUMBER_RE.findall(text)
    if not matches:
        return None
    num = matches[-1].replace(",", "").replace(" ", "")
    return num.rstrip(".") or None


def extract_answer(text: str, methods: Sequence[str] = DEFAULT_METHODS) -> str | None:
    """The final answer in `text` by the first method (in order) that finds one, or None.

    Args:
        text: The model's response.
        methods: Names from `METHODS`, tried in order.

    Raises:
        ValueError: an unknown method name (the message lists the known ones).
    """
    for method in methods:
        if method == "boxed":
            found = last_boxed(text)
        elif method == "answer_is":
            found = _after_marker(text, _ANSWER_IS_RE)
        elif method == "hashes":
            found = _after_marker(text, _HASHES_RE)
        elif method == "last_number":
            found = last_number(text)
        else:
            raise ValueError(f"unknown answer extraction method {method!r}; use some of {METHODS}")
        if found:
            return found
    return None


def check_methods(methods: Sequence[str]) -> tuple[str, ...]:
    """Validate a method list; returns it as a tuple."""
    methods = tuple(methods)
    if not methods:
        raise ValueError(f"answer extraction needs at least one method; use some of {METHODS}")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"unknown answer extraction method(s) {bad}; use some of {METHODS}")
    return methods
