"""`make_task`: a single-turn task from its CLI spec (``--task``).

A module of its own so the task modules (`envkit.trainers.local.tasks`, `envkit.trainers.local.word_tasks`) do
not import each other both ways.
"""

from __future__ import annotations

from typing import Any

from envkit.trainers.local.tasks import ArithmeticTask, EnvTask, ProblemSource
from envkit.trainers.local.word_tasks import WordSequenceTask

__all__ = ["make_task"]


def make_task(spec: str, env_kwargs: dict[str, Any] | None = None) -> ProblemSource:
    """A task from its CLI spec: ``arith`` / ``arith:<digits>`` or an envkit id such as ``envkit/Math-v0``."""
    if spec == "arith" or spec.startswith("arith:"):
        return ArithmeticTask(digits=int(spec.split(":", 1)[1]) if ":" in spec else 2)
    if spec == "words":  # continue an ordered list of words (`envkit.trainers.local.word_tasks`)
        return WordSequenceTask()
    if spec.startswith("envkit/"):
        return EnvTask(env_id=spec, env_kwargs=dict(env_kwargs or {}))
    raise ValueError(f"unknown task {spec!r}: use 'arith', 'arith:<digits>', 'words' or a single-turn envkit id")
