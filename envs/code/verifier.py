"""Batch code verification: the model's code + the problem's tests in the sandbox -> a reward.

Trainers call `CodeVerifier.verify_many(responses, problems)` and read ``result.reward`` and ``result.verdict``.
Reward modes: ``"all"`` (1.0 iff every test passes; stops at the first failure) or ``"fraction"`` (tests passed /
tests). Code is taken from the response's Python code block (the first that defines the entry point, else the
longest; an unterminated block counts), else the whole response; a response that does not define the entry
point is treated as a completion of the prompt (HumanEval style) and appended to it.

Example:
    >>> from envs.code.data import humaneval_problems
    >>> probs = humaneval_problems(limit=2)
    >>> with CodeVerifier() as v:                                  # doctest: +SKIP
    ...     [r.reward for r in v.verify_many([p.reference_code for p in probs], probs)]
    [1.0, 1.0]
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.code.data import CodeProblem
from envs.code.sandbox import Job, RunResult, Sandbox, SandboxConfig
from envs.verdict import Verdict
from envs.verifier_stats import BatchStats

REWARD_MODES = ("all", "fraction")
_FENCE_RE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)


def extract_code(response: str, problem: CodeProblem) -> str:
    """The program to run for `response` (see the module docstring)."""
    blocks = [b for b in _FENCE_RE.findall(response) if b.strip()]
    entry = problem.entry_point
    defines = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(entry)}\s*\(", re.M) if entry else None
    code = response
    if blocks:
        code = next((b for b in blocks if defines and defines.search(b)), max(blocks, key=len))
    if defines is not None and not defines.search(code) and problem.completion_prefix:
        code = problem.completion_prefix + code
    return code


@dataclass(frozen=True)
class CodeVerifierConfig:
    """Settings of `CodeVerifier`.

    Attributes:
        reward_mode: ``"all"`` (1.0 iff all tests pass) or ``"fraction"`` (share of tests passed).
        sandbox: The sandbox's settings (slots, time and memory limits, ...).
    """

    reward_mode: str = "all"
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def __post_init__(self) -> None:
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"CodeVerifierConfig.reward_mode must be one of {REWARD_MODES}, got {self.reward_mode!r}")


@dataclass(frozen=True)
class CodeResult:
    """The verdict on one response.

    Attributes:
        verdict: CORRECT (all tests passed), WRONG, TIMEOUT or ERROR (the sandbox failed).
        reward: See `CodeVerifierConfig.reward_mode`.
        passed: Tests that passed.
        total: Tests of the problem.
        detail: Why it failed (the program's error or the first failing test), "" when correct.
        code: The program that ran.
        stdout: Its captured stdout (capped).
        stderr: Its captured stderr (capped).
        seconds: Wall time in the sandbox.
    """

    verdict: Verdict
    reward: float
    passed: int
    total: int
    detail: str
    code: str = field(repr=False, default="")
    stdout: str = field(repr=False, default="")
    stderr: str = field(repr=False, default="")
    seconds: float = 0.0


class CodeVerifier:
    """Runs responses against problems' tests in a `Sandbox`. Use as a context manager or call `close()`.

    Args:
        config: Settings (default `CodeVerifierConfig()`).
        sandbox: Use this sandbox instead of starting one.
    """

    def __init__(self, config: CodeVerifierConfig | None = None, sandbox: Sandbox | None = None) -> None:
        self.config = config or CodeVerifierConfig()
        self._own = sandbox is None
        self.sandbox = sandbox or Sandbox(self.config.sandbox)
        self.stats = BatchStats()

    def close(self) -> None:
        """Stop the sandbox if this verifier started it."""
        if self._own:
            self.sandbox.close()

    def __enter__(self) -> CodeVerifier:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def job(self, code: str, problem: CodeProblem, timeout_s: float | None = None) -> Job:
        """The sandbox job that checks `code` against `problem`."""
        return Job(
            program=code,
            units=problem.units,
            setup=problem.setup,
            entry_point=problem.entry_point if problem.completion_prefix else None,
            timeout_s=timeout_s,
            stop_on_fail=self.config.reward_mode == "all",
        )

    def verify(self, response: str, problem: CodeProblem) -> CodeResult:
        """Verify one response (see `verify_many`)."""
        return self.verify_many([response], [problem])[0]

    def verify_many(self, responses: Sequence[str], problems: Sequence[CodeProblem]) -> list[CodeResult]:
        """Check ``responses[i]`` against ``problems[i]`` for every i, in parallel; results in input order.

        Never raises for bad code (it is a verdict); throughput is in ``self.stats.last_checks_per_s``.
        """
        if len(responses) != len(problems):
            raise ValueError(f"verify_many got {len(responses)} responses but {len(problems)} problems")
        t0 = time.perf_counter()
        codes = [extract_code(r, p) for r, p in zip(responses, problems)]
        runs = self.sandbox.run_many([self.job(c, p) for c, p in zip(codes, problems)])
        out = [self._score(run, p, c) for run, p, c in zip(runs, problems, codes)]
        self.stats.checks += len(out)
        self.stats.timeouts += sum(r.verdict is Verdict.TIMEOUT for r in out)
        self.stats.errors += sum(r.verdict is Verdict.ERROR for r in out)
        self.stats.last_batch = len(out)
        self.stats.last_batch_seconds = time.perf_counter() - t0
        return out

    def _score(self, run: RunResult, problem: CodeProblem, code: str) -> CodeResult:
        tests = [i for i, (_, is_test) in enumerate(problem.units) if is_test]
        passed = sum(1 for i in tests if i < len(run.results) and run.results[i] is True)
        total = len(tests)
        all_ok = run.status == "ok" and not run.program_error and passed == total and not run.errors
        if run.status == "error":
            verdict = Verdict.ERROR
        elif run.status == "timeout":
            verdict = Verdict.TIMEOUT
        else:
            verdict = Verdict.CORRECT if all_ok else Verdict.WRONG
        if self.config.reward_mode == "fraction":
            reward = 1.0 if all_ok else (passed / total if total and not run.program_error else 0.0)
        else:
            reward = 1.0 if all_ok else 0.0
        if all_ok:
            detail = ""
        elif run.status == "timeout":
            detail = f"time limit exceeded after {passed} of {total} tests"
        elif run.program_error:
            detail = run.program_error
        elif run.errors:
            detail = run.errors[0]
        else:
            detail = f"the program {run.status} (exit code {run.exit_code}, signal {run.signal}): {run.stderr[-300:]}"
        return CodeResult(verdict, reward, passed, total, detail, code, run.stdout, run.stderr, run.seconds)
