"""`envkit.trainers.sero_splice.splice_oracle_steps`: exact ids and spans, and both trainers splicing through it."""

from __future__ import annotations

from pathlib import Path

from envkit.core import Step
from envkit.trainers.sero_splice import splice_oracle_steps


def _steps(*pairs: tuple[str, str]) -> list[Step]:
    return [Step(observation="", action=a, reward=0.0, next_observation=o, terminated=False, truncated=False, info={})
            for a, o in pairs]  # fmt: skip


def test_exact_ids_and_spans():
    seen: list[tuple[list[int], str]] = []

    def obs(act: list[int], observation: str) -> list[int]:
        seen.append((act, observation))
        return [ord(c) for c in observation]

    tokens, spans = splice_oracle_steps([7, 8], _steps(("ab", "xy"), ("c", "z")), lambda a: [*map(ord, a), 0], obs)
    assert tokens == [7, 8, 97, 98, 0, 120, 121, 99, 0]
    assert spans == [(2, 5), (7, 9)]
    assert seen == [([97, 98, 0], "xy")]  # the observation after the last action is never encoded
    assert [tokens[s:e] for s, e in spans] == [[97, 98, 0], [99, 0]]


def test_no_steps_is_the_prefix_and_the_prefix_is_not_mutated():
    prefix = [1, 2]
    assert splice_oracle_steps(prefix, [], lambda a: [9], lambda act, o: [9]) == ([1, 2], [])
    tokens, _ = splice_oracle_steps(prefix, _steps(("a", "b")), lambda a: [5], lambda act, o: [6])
    assert tokens == [1, 2, 5] and prefix == [1, 2]


def test_both_trainers_splice_through_it():
    root = Path(__file__).resolve().parents[2]
    for rel in ("trainers/local/sero.py", "trainers/openrlhf/sero_rows.py"):
        assert "splice_oracle_steps(" in (root / rel).read_text(), rel
