"""The shared episode logic of the verifier envs ``envkit/Math-v0`` and ``envkit/Code-v0``.

Usage (in a domain module):
    >>> class MyEnv(VerifierEnv[MyProblem, MyResult, MyVerifier]):  # doctest: +SKIP
    ...     def __init__(self, ..., max_attempts=1, prompt_template="{question}", verifier=None, evaluation=False):
    ...         super().__init__(max_attempts=max_attempts, prompt_template=prompt_template,
    ...                          placeholder="question", verifier=verifier, evaluation=evaluation)
    ...         self._use_problems(cached_problems(data_path, "MY_DATA", (fmt,), load))

`VerifierEnv` is a single-turn (optionally multi-attempt) episode: ``reset`` picks a problem (``options={"index":
i}`` or ``{"task_id": id}``, else drawn from the seed) and shows `_prompt`; each ``step`` sends the response to the
verifier, appends ``(action, verdict, reward)`` to the transcript and shows `_feedback`; the episode ends on a
correct answer or after ``max_attempts``. The snapshot is ``(index, problem id, transcript, observation)``: an
immutable tuple, restored by problem id when the index no longer matches. A subclass says how to prompt, how to
word feedback, which domain info keys to add (`_domain_info`) and which verifier it uses by default
(`_default_verifier`).

`SharedPerConfig` keeps one process-wide instance per config (a verifier pool, a sandbox), made on first use and
closed at exit, so that many env instances do not start many pools. `cached_problems` loads a data set once per
process (keyed by the file's mtime and the loading settings).
"""

from __future__ import annotations

import atexit
import os
from abc import abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, Protocol, SupportsFloat, TypeVar, cast

from envkit.capability import SnapshotCapability
from envkit.credit.state_keys import digest
from envkit.envs.verdict import Verdict
from envkit.errors import SnapshotError
from envkit.snapshot import Snapshot, SnapshotEnvBase


class _Closable(Protocol):
    def close(self) -> None: ...


class _Problem(Protocol):
    @property
    def id(self) -> str: ...


class _Result(Protocol):
    @property
    def verdict(self) -> Verdict: ...

    @property
    def reward(self) -> float: ...


class _Verifier(Protocol):
    def verify(self, response: str, problem: Any) -> Any: ...


K = TypeVar("K", bound=Hashable)
T = TypeVar("T", bound=_Closable)
P = TypeVar("P", bound=_Problem)
R = TypeVar("R", bound=_Result)
V = TypeVar("V", bound=_Verifier)


class SharedPerConfig(Generic[K, T]):
    """Process-wide instances, one per config: made by ``make(config)`` on first use, closed at exit.

    Args:
        make: Builds the instance for a config.
    """

    def __init__(self, make: Callable[[K], T]) -> None:
        self._make = make
        self._items: dict[K, T] = {}
        atexit.register(self.close_all)

    def get(self, config: K) -> T:
        """The instance for `config` (made now if there is none yet)."""
        item = self._items.get(config)
        if item is None:
            item = self._items[config] = self._make(config)
        return item

    def close_all(self) -> None:
        """Close every instance and forget them (runs at exit)."""
        for item in self._items.values():
            item.close()
        self._items.clear()


_PROBLEMS: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def cached_problems(
    data_path: str | None, env_var: str, settings: tuple[Any, ...], load: Callable[[str | None], Iterable[P]]
) -> tuple[P, ...]:
    """The problems of ``data_path`` (else ``$env_var``, else None), loaded once per process by ``load(path)``.

    Args:
        data_path: The data file or directory the env was given (None: ``$env_var``, else the default data).
        env_var: The environment variable naming the default data file.
        settings: Everything else `load` depends on (format, limit, ...): part of the cache key.
        load: Loads the problems of a path (None: the env's embedded default).
    """
    path = data_path or os.environ.get(env_var) or None
    mtime = os.stat(path).st_mtime_ns if path and os.path.exists(path) else None
    key = (env_var, path, mtime, *settings)
    if key not in _PROBLEMS:
        _PROBLEMS[key] = tuple(load(path))
    return cast("tuple[P, ...]", _PROBLEMS[key])


class VerifierEnv(SnapshotEnvBase, Generic[P, R, V]):
    """A problem -> a response -> the verifier's reward; see the module docstring.

    Args:
        max_attempts: Responses allowed per episode (1 = single-turn).
        prompt_template: Format string with ``{<placeholder>}``.
        placeholder: The field `prompt_template` must contain.
        verifier: Use this verifier instead of `_default_verifier`.
        evaluation: Evaluation env (oracles refuse to run).
    """

    metadata = {"render_modes": [], **SnapshotCapability().metadata()}
    reset_options = frozenset({"task_id", "index"})

    def __init__(
        self, *, max_attempts: int, prompt_template: str, placeholder: str, verifier: V | None, evaluation: bool
    ) -> None:
        super().__init__(evaluation=evaluation)
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if "{" + placeholder + "}" not in prompt_template:
            raise ValueError(f"prompt_template must contain '{{{placeholder}}}'")
        self.max_attempts = max_attempts
        # Episodes last at most max_attempts steps: the snapshot check snapshots before the last attempt.
        self.metadata = {**type(self).metadata, **SnapshotCapability(check_depth=max_attempts - 1).metadata()}
        self.prompt_template = prompt_template
        self.problems: tuple[P, ...] = ()
        self._by_id: dict[str, int] = {}
        self._verifier = verifier
        self._index = 0
        self._history: tuple[tuple[str, str, float], ...] = ()  # (action, verdict, reward) per attempt
        self._obs = ""

    def state_settings(self) -> dict[str, Any]:
        """Attempts, prompt and the problem set (its size and first id: a different data file is another set)."""
        first = self.problems[0].id if self.problems else None
        return {"max_attempts": self.max_attempts, "prompt_template": self.prompt_template,
                "problems": (len(self.problems), first)}  # fmt: skip

    def _use_problems(self, problems: tuple[P, ...]) -> None:
        self.problems = problems
        self._by_id = {p.id: i for i, p in enumerate(problems)}

    # ----- what a domain says -------------------------------------------------------------------------------
    @abstractmethod
    def _default_verifier(self) -> V:
        """The verifier to use when none was passed (a process-wide shared one)."""

    @abstractmethod
    def _prompt(self, problem: P) -> str:
        """The first observation of an episode on `problem`."""

    def _attempts_left(self) -> str:
        """``"2 attempts left"`` / ``"1 attempt left"`` for feedback; ``""`` when no attempt is left."""
        left = self.max_attempts - len(self._history)
        return f"{left} attempt{'s' if left != 1 else ''} left" if left > 0 else ""

    @abstractmethod
    def _feedback(self, result: R) -> str:
        """The observation after an attempt (the attempt is already in the transcript)."""

    @abstractmethod
    def _domain_info(self, last: str | None, result: R | None) -> dict[str, Any]:
        """Info keys added to (or replacing) the common ones; `last` is the last attempt's verdict value."""

    # ----- the episode -------------------------------------------------------------------------------------
    @property
    def verifier(self) -> V:
        """The verifier this env uses (the process-wide shared one unless one was passed)."""
        if self._verifier is None:
            self._verifier = self._default_verifier()
        return self._verifier

    @property
    def problem(self) -> P:
        """The current problem (oracles read its reference answer or solution)."""
        return self.problems[self._index]

    def _info(self, result: R | None = None) -> dict[str, Any]:
        last = self._history[-1][1] if self._history else None
        info: dict[str, Any] = {
            "success": last == Verdict.CORRECT.value,
            "won": last == Verdict.CORRECT.value,
            "invalid": False,
            "task_id": self.problem.id,
            "attempt": len(self._history),
            "max_attempts": self.max_attempts,
            "verdict": last,
            # the exact state: the problem and the transcript of attempts (each action and its verdict)
            "state_key": digest(type(self).__name__, self.problem.id, [list(h[:2]) for h in self._history]),
        }
        info.update(self._domain_info(last, result))
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
        self._obs = self._prompt(self.problem)
        return self._obs, self._info()

    def _step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        result: R = self.verifier.verify(action, self.problem)
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
