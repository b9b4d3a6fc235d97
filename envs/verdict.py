"""The outcome of one verification, shared by the math and code verifiers.

`Verdict` says what happened; the reward that goes with it sits on each result object (``result.reward``).
Trainers usually only read ``reward``; `Verdict.TIMEOUT` and `Verdict.ERROR` let them tell a slow or broken
check apart from a wrong answer (for example, to drop such samples instead of punishing them).
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    """What a check concluded.

    Attributes:
        CORRECT: The answer matches the reference / all tests passed.
        WRONG: The answer was checked and does not match / some test failed (incl. code that does not compile).
        NO_ANSWER: No answer could be extracted from the response (math only; its reward is 0).
        TIMEOUT: The check ran past its time limit and was killed (its reward is 0, or the fraction of tests
            that passed before the kill when the code verifier rewards fractions).
        ERROR: The verifier itself failed (a worker crashed, the sandbox broke); not the model's fault.
    """

    CORRECT = "correct"
    WRONG = "wrong"
    NO_ANSWER = "no_answer"
    TIMEOUT = "timeout"
    ERROR = "error"
