"""``envkit/Math-v0``: a math problem -> the model's answer -> reward 1/0 from math-verify.

Usage:
    >>> import gymnasium, envkit
    >>> env = gymnasium.make("envkit/Math-v0")                      # embedded reasoning-gym problems
    >>> env = gymnasium.make("envkit/Math-v0", data_path="gsm8k_test.jsonl", max_attempts=3)  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step("... so the answer is \\\\boxed{42}")

Data: ``data_path`` (or the ``ENVKIT_MATH_DATA`` environment variable) names a local JSONL / JSON / Parquet file
or directory in GSM8K, MATH or DAPO-Math format (`envs.math.data`); without it, problems are generated offline
by reasoning-gym (``rg_tasks``, ``rg_size`` per family, ``rg_seed``). ``reset(seed=s)`` draws a problem from the
seed; ``reset(options={"index": i})`` or ``{"task_id": id}`` picks one.

Episodes are single-turn by default. With ``max_attempts > 1`` a wrong answer returns feedback ("... is not
correct, try again") and the episode continues until a correct answer or the last attempt. Reward per step:
1.0 for a correct answer, else 0.0. Info: ``success``/``won``, ``invalid`` (no answer could be extracted),
``task_id``, ``verdict``, ``extracted``, ``attempt``, ``answer_detail``.

Checks run in a shared `MathVerifier` worker pool (one per settings, per process), so many env instances do not
spawn many pools; pass ``verifier=`` to use your own.
"""

from __future__ import annotations

import atexit
import os
from typing import Any, SupportsFloat

from envkit.errors import SnapshotError, require
from envkit.snapshot import Snapshot, SnapshotEnvBase
from envs.math.data import DEFAULT_RG_TASKS, MathProblem, load_problems, reasoning_gym_problems
from envs.math.extract import DEFAULT_METHODS
from envs.math.verdict import Verdict
from envs.math.verifier import MathResult, MathVerifier, MathVerifierConfig

DEFAULT_PROMPT = "{question}\n\nReason step by step, then put your final answer within \\boxed{{}}."
DATA_ENV_VAR = "ENVKIT_MATH_DATA"

_SHARED: dict[MathVerifierConfig, MathVerifier] = {}
_DATA_CACHE: dict[tuple[Any, ...], tuple[MathProblem, ...]] = {}


def shared_verifier(config: MathVerifierConfig) -> MathVerifier:
    """The process-wide verifier for `config` (made on first use, closed at exit)."""
    v = _SHARED.get(config)
    if v is None:
        v = _SHARED[config] = MathVerifier(config)
    return v


@atexit.register
def _close_shared() -> None:
    for v in _SHARED.values():
        v.close()
    _SHARED.clear()


class MathEnv(SnapshotEnvBase):
    """See the module docstring.

    Args:
        data_path: Local data file/dir (default: ``$ENVKIT_MATH_DATA``, else reasoning-gym problems).
        fmt: Record format of `data_path` (``auto``, ``gsm8k``, ``math``, ``dapo``, ``generic``).
        limit: Load at most this many problems from `data_path`.
        rg_tasks: reasoning-gym families of the default data.
        rg_size: Problems per reasoning-gym family.
        rg_seed: Generation seed of the default data.
        rg_scorer: ``"math_verify"`` or ``"reasoning_gym"`` (the family's own scorer) for generated problems.
        max_attempts: Answers allowed per episode (1 = single-turn).
        prompt_template: Format string with ``{question}``.
        extraction: Answer extraction methods, in order (`envs.math.extract`).
        timeout_s: Time limit of one check.
        workers: Verifier worker processes.
        verifier: Use this verifier instead of the shared one.
        evaluation: Evaluation env (oracles refuse to run).
    """

    metadata = {"render_modes": [], "snapshot": "native", "snapshot_picklable": True}

    def __init__(
        self,
        data_path: str | None = None,
        fmt: str = "auto",
        limit: int | None = None,
        rg_tasks: tuple[str, ...] = DEFAULT_RG_TASKS,
        rg_size: int = 200,
        rg_seed: int = 0,
        rg_scorer: str = "math_verify",
        max_attempts: int = 1,
        prompt_template: str = DEFAULT_PROMPT,
        extraction: tuple[str, ...] = DEFAULT_METHODS,
        timeout_s: float = 5.0,
        workers: int | None = None,
        verifier: MathVerifier | None = None,
        evaluation: bool = False,
    ) -> None:
        super().__init__(evaluation=evaluation)
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if "{question}" not in prompt_template:
            raise ValueError("prompt_template must contain '{question}'")
        require("math_verify", extra="math", what="envkit/Math-v0")
        path = data_path or os.environ.get(DATA_ENV_VAR) or None
        mtime = os.stat(path).st_mtime_ns if path and os.path.exists(path) else None
        key = (path, mtime, fmt, limit, tuple(rg_tasks), rg_size, rg_seed, rg_scorer)
        if key not in _DATA_CACHE:
            if path:
                _DATA_CACHE[key] = tuple(load_problems(path, fmt=fmt, limit=limit))
            else:
                _DATA_CACHE[key] = tuple(reasoning_gym_problems(rg_tasks, size=rg_size, seed=rg_seed, scorer=rg_scorer))
        self.problems: tuple[MathProblem, ...] = _DATA_CACHE[key]
        self._by_id = {p.id: i for i, p in enumerate(self.problems)}
        self.max_attempts = max_attempts
        # Episodes last at most max_attempts steps: the snapshot check snapshots before the last attempt.
        self.metadata = {**type(self).metadata, "snapshot_check_depth": max_attempts - 1}
        self.prompt_template = prompt_template
        cfg_kwargs: dict[str, Any] = {"extraction": tuple(extraction), "timeout_s": timeout_s}
        if workers is not None:
            cfg_kwargs["workers"] = workers
        self._config = MathVerifierConfig(**cfg_kwargs)
        self._verifier = verifier
        self._index = 0
        self._history: tuple[tuple[str, str, float], ...] = ()  # (action, verdict, reward) per attempt
        self._obs = ""

    @property
    def verifier(self) -> MathVerifier:
        """The verifier this env uses (the shared one unless one was passed)."""
        if self._verifier is None:
            self._verifier = shared_verifier(self._config)
        return self._verifier

    @property
    def problem(self) -> MathProblem:
        """The current problem (oracles read its reference answer)."""
        return self.problems[self._index]

    def _info(self, result: MathResult | None = None) -> dict[str, Any]:
        solved = bool(self._history) and self._history[-1][1] == Verdict.CORRECT.value
        info: dict[str, Any] = {
            "success": solved,
            "won": solved,
            "invalid": bool(self._history) and self._history[-1][1] == Verdict.NO_ANSWER.value,
            "task_id": self.problem.id,
            "attempt": len(self._history),
            "max_attempts": self.max_attempts,
            "verdict": self._history[-1][1] if self._history else None,
        }
        if result is not None:
            info["extracted"] = result.extracted
            info["answer_detail"] = result.detail
        return info

    def _reset(self, *, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "task_id" in options:
            if options["task_id"] not in self._by_id:
                raise ValueError(f"unknown task_id {options['task_id']!r}; ids look like {self.problems[0].id!r}")
            self._index = self._by_id[options["task_id"]]
        elif "index" in options:
            self._index = int(options["index"]) % len(self.problems)
        else:
            self._index = int(self.np_random.integers(len(self.problems)))
        self._history = ()
        self._obs = self.prompt_template.format(question=self.problem.question)
        return self._obs, self._info()

    def _feedback(self, result: MathResult) -> str:
        left = self.max_attempts - len(self._history)
        if result.verdict is Verdict.CORRECT:
            return f"Correct: {result.extracted} is the right answer."
        if result.verdict is Verdict.NO_ANSWER:
            what = "No final answer was found in your response (put it within \\boxed{})."
        elif result.verdict is Verdict.TIMEOUT:
            what = f"Your answer {result.extracted} could not be checked in time."
        else:
            what = f"Your answer {result.extracted} is not correct."
        return what + (f" Try again ({left} attempt{'s' if left != 1 else ''} left)." if left > 0 else "")

    def _step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        result = self.verifier.verify(action, self.problem)
        self._history = (*self._history, (action, result.verdict.value, result.reward))
        self._obs = self._feedback(result)
        terminated = result.verdict is Verdict.CORRECT or len(self._history) >= self.max_attempts
        return self._obs, result.reward, terminated, False, self._info(result)

    def _snapshot(self) -> Any:
        return (self._index, self.problem.id, self._history, self._obs)

    def _restore(self, payload: Any, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        index, pid, history, obs = payload
        if index >= len(self.problems) or self.problems[index].id != pid:
            if pid not in self._by_id:
                raise SnapshotError(f"this snapshot is of problem {pid!r}, which this env's data does not have")
            index = self._by_id[pid]
        self._index, self._history, self._obs = index, history, obs
        return self._obs, self._info()

    def close(self) -> None:
        """Nothing to release per env (the shared verifier closes at exit)."""
