"""One math check, as run inside a verifier worker process (see `envkit.envs.math.verifier`).

`check(task)` parses the reference and the extracted answer with math-verify and compares them, or calls a
reasoning-gym scorer.

**Chains.** math-verify reads ``a = b`` (and ``a \\approx b``, ``a \\to b``, ``a \\mapsto b``, ``a := b``,
``a → b``, ``a ≡ b``, ``a ＝ b``, ``a == b``, ``a \\stackrel{?}{=} b``, ...) as its last side, so
``\\boxed{31 = 30}`` would earn the reward for 30 although it asserts something false. Here an answer with a
relation chain (`envkit.envs.math.extract.relation_chains`) is correct only if, besides matching the reference, every
side of every chain that is a *value* verifies equal to the chain's last value side. A side is a *label*, not a
value, when it names something rather than states a value: no digits once subscripts and ``\\text{}`` are
removed (``x``, ``f(x)``, ``m+n``, ``a_{10}``), or free variables while the reference has none (``x^2`` in
``x^2 = 4``). So ``x = 30``, ``f(x) = x^2+1``, ``2 \\cdot 15 = 30`` and ``30 = 30.0`` are accepted for 30 / x^2+1;
``31 = 30``, ``a = 31 = 30``, ``29.9 \\approx 30`` are wrong. Two further rules do not depend on spelling at all (`envkit.envs.math.relations`): the constant sides
of every equation in math-verify's own parse must agree (``\\mathrm{31} = 30``, ``\\pi = 30``), and every value the
answer writes must be read by the parser (``31 \\therefore 30`` parses as 30: wrong). Every relation the chain splitter knows (its
tables in `envkit.envs.math.extract`, read after NFKC) counts as ``=`` here; the order relations (``<``,
``\\le``, ``\\ne``, ...) are not chains: math-verify keeps and compares them as relations. An unpaired ``|``
(``31 | 30``, "divides") is wrong. (Sets, ``\\pm`` and "or" lists are already wrong
against a single reference: math-verify compares them as sets.) math-verify's own SIGALRM timeouts are switched off (they raise off the main thread and
turn a timeout into a silent False); instead `check` arms its own interval timer that raises `SoftTimeout`
(a BaseException, so math-verify's ``except Exception`` cannot swallow it) and the parent process kills the
worker if even that does not fire in time.
"""

from __future__ import annotations

import logging
import re
import signal
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envkit.envs.math.extract import relation_chains, unpaired_bar
from envkit.envs.math.relations import constant_sides_agree, dropped_values
from envkit.envs.verdict import Verdict


class SoftTimeout(BaseException):
    """The worker's own timer fired before the check finished."""


@dataclass(frozen=True)
class CheckTask:
    """What a worker needs for one check (picklable).

    Attributes:
        gold: The reference answer (LaTeX or plain text, with or without ``$``/``\\boxed``).
        answer: The answer extracted from the response.
        scorer: ``"math_verify"`` or ``"reasoning_gym"``.
        rg_dataset: reasoning-gym dataset name (scorer ``"reasoning_gym"`` only).
        rg_entry: reasoning-gym entry (question, answer, metadata) for its scorer.
        float_rounding: math-verify's float rounding (decimal places).
        soft_timeout_s: The worker's own timer (seconds).
    """

    gold: str
    answer: str
    scorer: str = "math_verify"
    rg_dataset: str | None = None
    rg_entry: Any = None
    float_rounding: int = 6
    soft_timeout_s: float = 5.0


_GOLD_CACHE: OrderedDict[str, Any] = OrderedDict()
_RG_SCORERS: dict[str, Callable[..., float]] = {}


def _on_alarm(signum: int, frame: Any) -> None:
    raise SoftTimeout


def _wrap(expr: str) -> str:
    s = expr.strip()
    if "$" in s or "\\boxed" in s or "\\(" in s or "\\[" in s:
        return s
    return f"${s}$"


def _parse(text: str) -> Any:
    from math_verify import parse

    parsed = parse(_wrap(text), parsing_timeout=None)  # type: ignore[arg-type]
    if not parsed:
        parsed = parse(text, parsing_timeout=None)  # type: ignore[arg-type]
    return parsed


def _gold(gold: str) -> Any:
    if gold in _GOLD_CACHE:
        _GOLD_CACHE.move_to_end(gold)
        return _GOLD_CACHE[gold]
    parsed = _parse(gold)
    _GOLD_CACHE[gold] = parsed
    if len(_GOLD_CACHE) > 4096:
        _GOLD_CACHE.popitem(last=False)
    return parsed


#: What a label may hide digits in: subscripts, and text wrappers WITHOUT digits (``\text{31}`` is 31).
_SUBSCRIPT_RE = re.compile(r"_\{[^{}]*\}|_\w|\\(?:text|mathrm|mathit|operatorname)\{[^{}\d]*\}")


def _free(parsed: Any) -> bool:
    return bool(parsed) and bool(getattr(parsed[0], "free_symbols", None))


def _is_label(side: str, parsed: Any, gold_free: bool) -> bool:
    bare = _SUBSCRIPT_RE.sub("", side)
    if not any(ch.isdigit() for ch in bare):
        return True
    return not gold_free and _free(parsed)


def _chains_hold(task: CheckTask, gold: Any) -> str:
    """ "" if every chain's value sides are equal (see the module docstring), else why not."""
    from math_verify import verify

    gold_free = _free(gold)
    for sides in relation_chains(task.answer):
        values = []
        for side in sides:
            if not side:
                continue
            parsed = _parse(side)
            if not _is_label(side, parsed, gold_free):
                if not parsed:
                    return f"a side of the chain cannot be parsed: {side!r:.80}"
                values.append((side, parsed))
        for side, parsed in values[:-1]:
            if not verify(values[-1][1], parsed, float_rounding=task.float_rounding, timeout_seconds=None):
                return f"the chain asserts {side!s:.60} = {values[-1][0]!s:.60}, which is false"
    return ""


def _equal(task: CheckTask) -> Callable[[Any, Any], bool]:
    from math_verify import verify

    return lambda a, b: bool(verify(a, b, float_rounding=task.float_rounding, timeout_seconds=None))


def _math_verify(task: CheckTask) -> tuple[Verdict, str]:
    from math_verify import verify

    gold = _gold(task.gold)
    if not gold:
        return Verdict.ERROR, f"math-verify could not parse the reference answer {task.gold!r:.200}"
    pred = _parse(task.answer)
    if not pred:
        return Verdict.WRONG, f"math-verify could not parse the answer {task.answer!r:.200}"
    ok = verify(gold, pred, float_rounding=task.float_rounding, timeout_seconds=None)
    detail = f"parsed {pred[0]!s:.120} vs reference {gold[0]!s:.120}"
    if ok and unpaired_bar(task.answer):
        return Verdict.WRONG, f"{detail}; but the answer has an unpaired '|' (write the value alone)"
    if ok:
        why = (
            _chains_hold(task, gold)
            or constant_sides_agree(pred, _equal(task))
            or dropped_values(task.answer, _parse, _equal(task))
        )
        if why:
            return Verdict.WRONG, f"{detail}; but {why}"
    return (Verdict.CORRECT if ok else Verdict.WRONG), detail


def _rg_scorer(name: str) -> Callable[..., float]:
    fn = _RG_SCORERS.get(name)
    if fn is None:
        import reasoning_gym

        fn = _RG_SCORERS[name] = reasoning_gym.get_score_answer_fn(name)
    return fn


def _reasoning_gym(task: CheckTask) -> tuple[Verdict, str]:
    name = str(task.rg_dataset)
    fn = _rg_scorer(name)
    try:
        score = float(fn(task.answer, task.rg_entry))
    except Exception as exc:  # some reasoning-gym scorers raise on malformed answers: that is a wrong answer
        return Verdict.WRONG, f"reasoning-gym scorer {name!r} rejected the answer: {type(exc).__name__}: {exc!s:.200}"
    return (Verdict.CORRECT if score >= 1.0 - 1e-9 else Verdict.WRONG), f"reasoning-gym score {score:.4f}"


def check(task: CheckTask) -> tuple[Verdict, str]:
    """Run one check under the worker's own timer; returns ``(verdict, detail)`` and never raises."""
    if task.scorer == "reasoning_gym":  # import the scorer before the timer starts (reasoning-gym loads slowly)
        try:
            _rg_scorer(str(task.rg_dataset))
        except Exception as exc:
            return Verdict.ERROR, f"cannot load the reasoning-gym scorer {task.rg_dataset!r}: {exc!s:.300}"
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(task.soft_timeout_s, 1e-3))
    try:
        if task.scorer == "reasoning_gym":
            return _reasoning_gym(task)
        return _math_verify(task)
    except SoftTimeout:
        return Verdict.TIMEOUT, f"the check ran past {task.soft_timeout_s:g} s and was interrupted"
    except MemoryError:  # the worker's address-space cap (MathVerifierConfig.memory_mb): the answer's fault
        return Verdict.WRONG, "checking the answer ran out of the worker's memory cap"
    except Exception as exc:
        return Verdict.ERROR, f"verifier error: {type(exc).__name__}: {exc!s:.300}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def warm_up() -> None:
    """Import math-verify and run one check so that the first real check is not slow; silence its warnings."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    for gold, answer in (("\\frac{1}{2}", "0.5"), ("x^2+2x+1", "(x+1)^2"), ("[1, 2)", "[1,2)")):
        check(CheckTask(gold=gold, answer=answer, soft_timeout_s=30.0))
