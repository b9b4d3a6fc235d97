"""Math-v0: ``\\boxed{31 REL 30}`` earns nothing for 30, whatever the relation REL (table-driven).

math-verify reads many relations as "the right-hand side is the answer" (or its parser drops the left side),
so each relation it splits on is a chain whose sides must all be equal (`envkit.envs.math.extract`), read
after NFKC (the full-width ``＝``, ``⩵``). Honest answers that use the same relations truthfully keep their
reward, and the verifier keeps serving.
"""

from __future__ import annotations

import pytest

from envkit.envs.math.data import MathProblem
from envkit.envs.math.verifier import MathVerifier, MathVerifierConfig

pytest.importorskip("math_verify")

#: Every relation that earned the reward for the last side of ``31 REL 30`` before the chain rule knew it.
RELATIONS = [
    r"\mapsto", r"\longmapsto", r"\iff", r"\Leftrightarrow", r"\leftrightarrow", r"\Longleftrightarrow",
    r"\impliedby", ":=", r"\ :=\ ", r"\coloneqq", r"\eqqcolon", r"\doteq", r"\sim", r"\thickapprox", r"\eqsim",
    r"\backsim", r"\asymp", r"\propto", r"\vdash", r"\ni", r"\in", r"\mid", r"\colon", r"\dots", r"\equal",
    r"\eq", r"\stackrel{?}{=}", r"\stackrel{!}{=}", r"\overset{?}{=}", r"\stackrel{\text{def}}{=}",
    r"\overset{\text{def}}{=}", "==", r"\!=", "->", "<=>", "~", "|",
    "→", "⇒", "⟶", "⟹", "↦", "⇔", "↔", "⟺", "∼", "∝", "≡", "≔", "≐", "≟", "≝", "≜", "≍", "⩵", "＝",
]  # fmt: skip


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(MathVerifierConfig(workers=2, timeout_s=5.0, kill_grace_s=1.0, memory_mb=1536))
    yield v
    v.close()


def _rewards(v: MathVerifier, gold: str, answers: list[str]) -> list[float]:
    probs = [MathProblem("rel", "?", gold)] * len(answers)
    return [r.reward for r in v.verify_many([f"\\boxed{{{a}}}" for a in answers], probs)]


def test_every_relation_is_a_chain(verifier):
    hedges = [f"31 {rel} 30" for rel in RELATIONS]
    got = dict(zip(hedges, _rewards(verifier, "30", hedges)))
    assert {a: r for a, r in got.items() if r} == {}
    # the same relations between equal sides (or after a label) keep the reward
    honest = [f"30 {rel} 30" for rel in RELATIONS if rel not in ("|", r"\mid")] + [
        f"x {rel} 30" for rel in RELATIONS[:8]
    ]
    got = dict(zip(honest, _rewards(verifier, "30", honest)))
    assert {a: r for a, r in got.items() if r != 1.0} == {}


def test_order_relations_and_absolute_values_are_unaffected(verifier):
    assert _rewards(verifier, "x > 3", ["x > 3", "x \\le 3", "3 < x"]) == [1.0, 0.0, 1.0]
    assert _rewards(verifier, "5", ["|-5|", "|-5| = 5", "|-5| = 6", "\\frac{10}{2}"]) == [1.0, 1.0, 0.0, 1.0]
    assert _rewards(verifier, "[1,2)", ["x \\in [1, 2)", "[1,2)"]) == [1.0, 1.0]
    assert _rewards(verifier, "\\frac{1}{2}", ["0.5", "1/3"]) == [1.0, 0.0]  # still serving


#: Round three: spellings of ``31 = 30`` that no relation table names -- font and text wrappers, constants,
#: logical connectives, set operators, line breaks, operator names. Each was paid for 30 before the
#: spelling-free rules (`envkit.envs.math.relations`); invented ones beside the reported ones.
SPELLINGS = [
    r"\mathrm{31} = 30", r"\text{31} = 30", r"\textbf{31} = 30", r"\mathbf{31}=30", r"\mathit{31}=30",
    r"\operatorname{31} = 30", r"{\rm 31} = 30", r"\overline{31} = 30", r"\hat{31}=30", r"\tilde{31} = 30",
    r"\text{31 apples} = 30", r"\pi = 30", r"e = 30", r"\infty = 30", r"\sqrt{961} = 30", r"\{31\} = 30",
    r"31 \therefore 30", r"31 \because 30", r"31 \land 30", r"31 \lor 30", r"31 \wedge 30", r"31 \vee 30",
    r"31 \operatorname{=} 30", r"31 \hbox{=} 30", r"31 \Rightarrow 30", r"31 \rightarrow 30", r"31 \iff 30",
    r"31 \cap 30", r"31 \cup 30", r"31\setminus 30", r"31 \& 30", r"31 \colon 30", r"31 \mid 30", r"31 \\ 30",
    r"\pi \therefore 30", r"\frac{62}{2} \therefore 30", r"31 \;\therefore\; 30", r"31 \mathrel{\therefore} 30",
    r"31 \Longrightarrow 30", r"x = 31 = 30", r"31 \models 30", r"31 \quad\Rightarrow\quad 30",
]  # fmt: skip
#: Honest answers for 30, and references that must still pay against themselves.
HONEST_30 = [
    "30", r"\boxed{30}", "x = 30", "30.0", r"2 \cdot 15 = 30", "30 = 30.0", "m+n=30", r"\frac{60}{2}",
    r"30 \text{ apples}", r"30^\circ", r"30\,\text{cm}^2", r"a_{10} = 30", r"\text{30}", r"\mathbf{30}", "30\\%",
]  # fmt: skip
SELF = [
    r"\frac{14}{3}", r"\left( 3, \frac{\pi}{2} \right)", "6 - 5i", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "[-2,7]",
    r"10\%", r"x \in [-2,7]", r"5.4 \text{ cents}", r"\sqrt[3]{27}", r"\log_2 8", r"3.5\times 10^{4}", r"\binom{6}{2}",
    "y = 2x + 3", r"(-\infty, 3]", r"3\frac{1}{2}", r"11\sqrt2", r"\frac12", r"1,\!000,\!000", r"2\pi", r"\sin 30^\circ",
    r"\frac{-1 \pm \sqrt{5}}{2}", "7!", r"\lfloor 3.5 \rfloor", r"\text{A, C}", "k = 3", "2:3",
]  # fmt: skip


def test_relations_are_compared_whatever_the_spelling(verifier):
    got = dict(zip(SPELLINGS, _rewards(verifier, "30", SPELLINGS)))
    assert {a: r for a, r in got.items() if r} == {}
    got = dict(zip(HONEST_30, _rewards(verifier, "30", HONEST_30)))
    assert {a: r for a, r in got.items() if r != 1.0} == {}
    got = {g: _rewards(verifier, g, [g])[0] for g in SELF}
    assert {a: r for a, r in got.items() if r != 1.0} == {}


def test_dropped_values_are_named():
    from envkit.envs.math.check import CheckTask, check

    verdict, detail = check(CheckTask(gold="30", answer=r"31 \therefore 30"))
    assert verdict.name == "WRONG" and "ignores the value '31'" in detail
    verdict, detail = check(CheckTask(gold="30", answer=r"\mathrm{31} = 30"))
    assert verdict.name == "WRONG" and "which is false" in detail
