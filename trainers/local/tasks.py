"""Single-turn training tasks: prompts with a verifier (synthetic arithmetic, or an envkit verifier env).

A task hands out `Problem`s and scores completions with rewards in [0, 1] (1 = correct). Two kinds:

- `ArithmeticTask`: ``"37+45="`` -> ``"82"``, verified exactly in-process. Small models learn it in minutes on a
  CPU (the char-level tokenizer from `envkit.runtime.models.arithmetic_tokenizer` has only the task's tokens).
- `EnvTask`: a single-turn envkit env such as ``envkit/Math-v0`` or ``envkit/Code-v0``: the prompt is the
  observation of ``reset(seed=...)`` and the reward comes from the env's own verifier (its batch API
  ``verify_many`` when it has one, else one `step` per completion from a restored snapshot).

Example:
    >>> import numpy as np
    >>> task = ArithmeticTask(digits=1)
    >>> p = task.sample(np.random.default_rng(0), 1)[0]
    >>> task.score([p], [p.answer])
    [1.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from envkit.snapshot import snapshot_env


@dataclass(frozen=True)
class Problem:
    """One prompt of a single-turn task.

    Attributes:
        task_id: Stable id (groups and the XRPO corpus key on it).
        prompt: The prompt text (before any chat template).
        answer: The reference completion when known (SFT warm-up target), else None.
        seed: The env seed that reproduces it (env tasks), else None.
    """

    task_id: str
    prompt: str
    answer: str | None = None
    seed: int | None = None


class ProblemSource(Protocol):
    """What the local trainer needs from a single-turn task."""

    @property
    def name(self) -> str:
        """Task name in the logs."""
        ...

    @property
    def raw_prompts(self) -> bool:
        """True: prompts are fed as-is; False: through the tokenizer's chat template."""
        ...

    def sample(self, rng: np.random.Generator, n: int) -> list[Problem]:
        """`n` problems drawn with `rng` (deterministic given its state)."""
        ...

    def score(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[float]:
        """Reward in [0, 1] of `completions[i]` as an answer to `problems[i]`."""
        ...

    def check(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[tuple[float, bool]]:
        """(reward, well-formed) of each completion (EDEN's anchor validity)."""
        ...


@dataclass(frozen=True)
class ArithmeticTask:
    """Addition of two numbers of `digits` digits, e.g. ``"37+45="`` -> ``"82"``.

    Attributes:
        digits: Digits per operand (1-4).
        name: Task name in the logs.
        raw_prompts: Prompts are fed to the model as-is (no chat template).
    """

    digits: int = 2
    name: str = "arith"
    raw_prompts: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 4:
            raise ValueError(f"ArithmeticTask.digits must be in 1..4, got {self.digits}")

    def sample(self, rng: np.random.Generator, n: int) -> list[Problem]:
        hi = 10**self.digits
        pairs = rng.integers(0, hi, size=(n, 2))
        return [Problem(task_id=f"{a}+{b}", prompt=f"{a}+{b}=", answer=str(a + b)) for a, b in pairs.tolist()]

    def check(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[tuple[float, bool]]:
        """(reward, well-formed: digits only) per completion."""
        return [(float(c.strip() == p.answer), c.strip().isdigit()) for p, c in zip(problems, completions, strict=True)]

    def score(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[float]:
        return [r for r, _ in self.check(problems, completions)]


@dataclass
class EnvTask:
    """A single-turn envkit env (``envkit/Math-v0``, ``envkit/Code-v0``) as a task.

    The env is built once; `sample` resets it with fresh seeds and keeps the problem object (or a snapshot) of
    each reset state. `check` verifies a batch with the env's own verifier: ``env.verifier.verify_many`` when the
    env has one (Math-v0, Code-v0), else one `step` per completion from the restored snapshot.

    Attributes:
        env_id: Registered envkit id.
        env_kwargs: Keyword arguments for `envkit.make`.
        raw_prompts: False: prompts go through the tokenizer's chat template when it has one.
        answer_format: How a reference answer becomes an SFT target (``{answer}`` is replaced).
    """

    env_id: str = "envkit/Math-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    raw_prompts: bool = False
    answer_format: str = "\\boxed{{{answer}}}"

    def __post_init__(self) -> None:
        from envkit.registration import make

        self.env: gym.Env[str, str] = make(self.env_id, **self.env_kwargs).unwrapped
        self.name = self.env_id.split("/")[-1]
        self._problems: dict[str, Any] = {}
        self._snapshots: dict[str, Any] = {}

    def sample(self, rng: np.random.Generator, n: int) -> list[Problem]:
        out = []
        for seed in rng.integers(0, 2**31 - 1, size=n).tolist():
            obs, info = self.env.reset(seed=int(seed))
            task_id = str(info.get("task_id", f"seed-{seed}"))
            problem = getattr(self.env, "problem", None)
            if problem is not None:
                self._problems[task_id] = problem
            else:
                self._snapshots[task_id] = snapshot_env(self.env).snapshot()
            target = self._target(problem)
            out.append(Problem(task_id=task_id, prompt=str(obs), answer=target, seed=seed))
        return out

    def _target(self, problem: Any) -> str | None:
        """The SFT target of an env problem: its answer in `answer_format`, or its reference code in a fence."""
        answer = getattr(problem, "answer", None)
        if answer is not None:
            return self.answer_format.format(answer=answer)
        code = getattr(problem, "reference_code", None)
        return None if code is None else f"```python\n{code}\n```"

    def check(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[tuple[float, bool]]:
        """(reward, well-formed) per completion, from the env's verifier."""
        verifier = getattr(self.env, "verifier", None)
        if (
            verifier is not None
            and hasattr(verifier, "verify_many")
            and all(p.task_id in self._problems for p in problems)
        ):
            results = verifier.verify_many(list(completions), [self._problems[p.task_id] for p in problems])
            return [(float(r.reward), getattr(r.verdict, "value", "") != "no_answer") for r in results]
        out = []
        for p, c in zip(problems, completions, strict=True):
            snapshot_env(self.env).restore(self._snapshots[p.task_id])
            _, reward, _, _, info = self.env.step(c)
            out.append((float(info.get("success", float(reward) > 0)), not info.get("invalid", False)))
        return out

    def score(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[float]:
        return [r for r, _ in self.check(problems, completions)]
