"""``envkit/SWE-v0``: fix a repository through shell and edit tool calls; hidden tests give the reward.

Usage::

    import gymnasium, envkit
    env = gymnasium.make("envkit/SWE-v0")          # shipped more-itertools tasks, local bubblewrap backend
    obs, info = env.reset(seed=0)                   # obs: the issue text and the tool syntax
    obs, r, term, trunc, info = env.step('{"tool": "bash", "command": "ls"}')
    s = env.snapshot()                              # ~ms: the work tree becomes an immutable overlay layer
    env.step('{"tool": "bash", "command": "rm -rf more_itertools"}')
    env.restore(s)                                  # the tree, cwd, exported variables and step count are back

Actions are JSON tool calls (`envkit.envs.swe.tools`): ``bash``, ``view``, ``str_replace``, ``create``, ``submit``.
Malformed actions return feedback with ``info["invalid"] = True`` and use up a step. The episode ends at
``submit`` (terminated) or after ``max_steps`` actions (truncated); either way the task's tests run and the
reward is 1.0 when all FAIL_TO_PASS and PASS_TO_PASS tests pass, else 0.0.

Constructor options: ``tasks`` (a JSONL path or a list of `SweTask`; default the shipped set), ``backend``
(``"local"`` | ``"docker"`` | a `Backend`), ``max_steps`` (50), ``limits`` (`Limits`), ``test_timeout`` (300 s),
``max_layers`` (48; deeper snapshot stacks are merged), ``owner`` (whom the episode's snapshot layers are
charged to, `envkit.envs.swe.store_quota`; default the thread's `envkit.tenancy.current_owner`, else the env
itself), ``screen_diff`` (True: the static screen of the graded
diff for harness tampering, `envkit.envs.swe.screen`; False only to test the runtime layers). Reset options: ``task_id`` or ``index``; otherwise the
task is drawn from the seed.

Info keys: ``task_id``, ``success``/``won`` (tests passed; set when the episode ends), ``invalid``, ``step``,
``tool``, ``exit_code`` (bash), ``tests_failed`` (ids, at the end), ``grade_void`` (at the end: why the grading run
did not count, e.g. the static screen's findings or the runner's audit hook; empty when it counted), ``cwd``.
"""

from __future__ import annotations

import copy
import errno
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, SupportsFloat

from envkit.capability import SnapshotCapability
from envkit.credit.state_keys import digest
from envkit.envs.swe.backend import WORKDIR, Backend, Limits
from envkit.envs.swe.grading import Grade, grade
from envkit.envs.swe.layer_files import OverlayError
from envkit.envs.swe.layers import Account, LayerStore
from envkit.envs.swe.overlay import OverlayTree
from envkit.envs.swe.sandbox import LocalBackend
from envkit.envs.swe.tasks import SweTask, load_tasks
from envkit.envs.swe.tools import TOOLS, ToolError, create, parse_action, str_replace, view
from envkit.envs.swe.tree_digest import tree_digest
from envkit.envs.swe.workspace import TaskLayers, task_layers
from envkit.errors import SnapshotError
from envkit.snapshot import Snapshot, SnapshotEnvBase
from envkit.tenancy import current_owner

INSTRUCTIONS = f"""You are working in a software repository at {WORKDIR}. Fix the issue below so that the
repository's tests pass. Act with one JSON tool call per message:
  {{"tool": "bash", "command": "<shell command>", "timeout": 60}}      run a command (cwd and exports persist)
  {{"tool": "view", "path": "<file or dir>", "view_range": [start, end]}}  show numbered lines or list a dir
  {{"tool": "str_replace", "path": "<file>", "old_str": "<exact text>", "new_str": "<replacement>"}}
  {{"tool": "create", "path": "<file>", "file_text": "<content>"}}     write a whole file
  {{"tool": "submit"}}                                                  finish; hidden tests decide the reward
Paths are relative to {WORKDIR}. There is no network access."""


@dataclass(frozen=True)
class SWEState:
    """The snapshot payload (immutable, picklable).

    Attributes:
        task_id: The task.
        stack: Layer ids of the work tree, bottom first (one reference owned by the snapshot).
        store: Root of the layer store holding them.
        cwd: Shell working directory.
        env: Exported shell variables.
        step: Actions taken.
        obs: Observation at the snapshot.
        info: Info at the snapshot.
        disk_bytes: Disk the snapshot added to the layer store (the layer its freeze made; 0 when the tree had
            no new edits): what a server charges it beyond its Python size.
    """

    task_id: str
    stack: tuple[str, ...]
    store: str
    cwd: str
    env: tuple[tuple[str, str], ...]
    step: int
    obs: str
    info: tuple[tuple[str, Any], ...]
    disk_bytes: int = 0


def _close_accounts(store: LayerStore, accounts: list[Account]) -> None:
    for account in accounts:
        store.close_account(account)


def make_backend(backend: str | Backend, limits: Limits | None) -> Backend:
    """A backend by name (``"local"``, ``"docker"``) or the given instance."""
    if not isinstance(backend, str):
        return backend
    if backend == "local":
        return LocalBackend(limits)
    if backend == "docker":
        from envkit.envs.swe.container import DockerBackend

        return DockerBackend(limits)
    raise ValueError(f"backend must be 'local', 'docker' or a Backend instance, got {backend!r}")


class SWEEnv(SnapshotEnvBase):
    """See the module docstring."""

    metadata = {"render_modes": [], **SnapshotCapability(holds_resources=True).metadata()}
    reset_options = frozenset({"task_id", "index"})

    def __init__(
        self,
        tasks: str | Path | Sequence[SweTask] | None = None,
        backend: str | Backend = "local",
        max_steps: int = 50,
        limits: Limits | None = None,
        test_timeout: float = 300.0,
        max_layers: int = 48,
        store: LayerStore | None = None,
        evaluation: bool = False,
        screen_diff: bool = True,
        owner: str | None = None,
    ) -> None:
        super().__init__(evaluation=evaluation)
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.tasks: list[SweTask] = (
            list(tasks) if isinstance(tasks, Sequence) and not isinstance(tasks, str) else load_tasks(tasks)
        )
        if not self.tasks:
            raise ValueError("the task list is empty; pass tasks= a JSONL file or a list of SweTask")
        self._by_id = {t.instance_id: t for t in self.tasks}
        self.max_steps = max_steps
        self.test_timeout = test_timeout
        self.backend = make_backend(backend, limits)
        self.store = store or LayerStore.default()
        self.max_layers = max_layers
        self.screen_diff = screen_diff
        self.owner = owner or current_owner() or f"env-{id(self):x}-{os.getpid()}"
        self.account: Account | None = None
        self._accounts: list[Account] = []  # the open one, for the finalizer (which must not hold the env)
        self.tree: OverlayTree | None = None
        self.task: SweTask = self.tasks[0]
        self.layers: TaskLayers | None = None
        self.cwd = WORKDIR
        self.shell_env: tuple[tuple[str, str], ...] = ()
        self.t = 0
        self.last_grade: Grade | None = None
        self._last: tuple[str, dict[str, Any]] = ("", {})
        self._gold: tuple[str, OverlayTree] | None = None

    # ----- helpers ----------------------------------------------------------------------------------------------
    @property
    def root(self) -> str:
        """Host path of the mounted work tree (privileged access for oracles and tests)."""
        if self.tree is None:
            raise SnapshotError("the env has no work tree yet; call reset() first")
        return self.tree.merged

    def _use_task(self, task: SweTask) -> TaskLayers:
        self.backend.select(task.environment)  # its interpreter / image (raises naming the build command)
        self.task = task
        self.layers = task_layers(self.store, task)
        if self.tree is None or self.tree.pinned != len(self.layers.start):
            if self.tree is not None:
                self.tree.close()
            self.tree = OverlayTree(
                self.store,
                pinned=len(self.layers.start),
                max_layers=self.max_layers,
                size_mb=self.backend.limits.repo_mb or None,
                max_inodes=self.backend.limits.repo_inodes,
                account=self.account,
            )
        return self.layers

    def _new_account(self) -> None:
        """Charge the coming episode's layers to a fresh account of this env's owner (`Limits.snapshot_mb`)."""
        lim = self.backend.limits
        account = self.store.open_account(self.owner, lim.snapshot_mb, lim.snapshot_inodes)
        if self.account is not None:
            self.store.close_account(self.account)
        else:  # an env dropped without close() must not keep its owner's floor reserved for ever
            weakref.finalize(self, _close_accounts, self.store, self._accounts)
        self.account = account
        self._accounts[:] = [account]
        if self.tree is not None:
            self.tree.account = account

    def _info(self, **extra: Any) -> dict[str, Any]:
        info: dict[str, Any] = {
            "task_id": self.task.instance_id,
            "success": False,
            "won": False,
            "invalid": False,
            "step": self.t,
            "cwd": self.cwd,
        }
        info.update(extra)
        if self.tree is not None and self.tree.mounted:  # the exact state: work tree, cwd and exported variables
            info["state_key"] = digest("swe", self.task.instance_id, tree_digest(self.tree), self.cwd, self.shell_env)
        return info

    def gold_root(self) -> str:
        """Host path of a mounted view of the current task's gold state (privileged, for oracles; do not write)."""
        assert self.layers is not None
        if self._gold is None or self._gold[0] != self.task.instance_id:
            if self._gold is not None:
                self._gold[1].close()
            view = OverlayTree(self.store, pinned=len(self.layers.gold), max_layers=len(self.layers.gold) + 1)
            view.mount(self.layers.gold)
            self._gold = (self.task.instance_id, view)
        return self._gold[1].merged

    # ----- SnapshotEnvBase --------------------------------------------------------------------------------------
    def _reset(self, *, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "task_id" in options:
            if options["task_id"] not in self._by_id:
                raise ValueError(f"unknown task_id {options['task_id']!r}; known: {sorted(self._by_id)[:10]}...")
            task = self._by_id[options["task_id"]]
        elif "index" in options:
            task = self.tasks[int(options["index"]) % len(self.tasks)]
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._new_account()
        layers = self._use_task(task)
        assert self.tree is not None
        self.tree.mount(layers.start)
        self.cwd = WORKDIR
        self.shell_env = tuple(sorted(self.backend.base_env().items()))
        self.t = 0
        self.last_grade = None
        obs = f"{INSTRUCTIONS}\n\n<issue>\n{task.problem_statement.strip()}\n</issue>"
        self._last = (obs, self._info())
        return self._last[0], dict(self._last[1])

    def _run_tool(self, action: str) -> tuple[str, dict[str, Any], bool]:
        """Returns (observation, extra info, submitted)."""
        try:
            call = parse_action(action)
        except ToolError as exc:
            return str(exc), {"invalid": True, "tool": ""}, False
        except (ValueError, TypeError, RecursionError, MemoryError) as exc:  # e.g. int digits limit of json
            return f"invalid action: {exc}"[:2000], {"invalid": True, "tool": ""}, False
        a = call.args
        extra: dict[str, Any] = {"tool": call.tool}
        try:
            if call.tool == "submit":
                return "Submitted.", extra, True
            if call.tool == "bash":
                timeout = float(a.get("timeout") or self.backend.limits.timeout_s)
                r = self.backend.run(self.root, a["command"], cwd=self.cwd, env=dict(self.shell_env), timeout=timeout)
                self.cwd, self.shell_env = r.cwd, r.env
                extra["exit_code"] = r.exit_code
                out = r.output if r.output.strip() else "(no output)"
                return out + ("" if r.exit_code in (0, None) else f"\n[exit code {r.exit_code}]"), extra, False
            if call.tool == "view":
                return view(self.root, a["path"], a.get("view_range")), extra, False
            if call.tool == "str_replace":
                return str_replace(self.root, a["path"], a["old_str"], a.get("new_str", "")), extra, False
            if call.tool == "create":
                return create(self.root, a["path"], a["file_text"]), extra, False
        except ToolError as exc:
            return f"Error: {exc}", {**extra, "invalid": True}, False
        except OSError as exc:
            return f"Error: {exc.strerror or exc}", {**extra, "invalid": True}, False
        except (ValueError, UnicodeError, OverflowError, RecursionError, MemoryError) as exc:
            return f"Error: the action could not be carried out: {exc}"[:2000], {**extra, "invalid": True}, False
        raise AssertionError(f"unhandled tool {call.tool}; known {TOOLS}")  # pragma: no cover

    def _step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, extra, submitted = self._run_tool(action)
        self.t += 1
        truncated = not submitted and self.t >= self.max_steps
        reward = 0.0
        info = self._info(**extra)
        if submitted or truncated:
            g = self.evaluate()
            reward = 1.0 if g.success else 0.0
            info.update(success=g.success, won=g.success, tests_failed=list(g.failed), tests_passed=g.passed)
            info["grade_void"] = list(g.void)
            verdict = "All tests pass." if g.success else f"{len(g.failed)} required test(s) fail."
            obs = f"{obs}\n[episode over: {verdict}]" if truncated else f"{obs} {verdict}"
        self._last = (obs, info)
        return obs, reward, submitted, truncated, dict(info)

    def evaluate(self) -> Grade:
        """Grade the current tree: its source changes on pristine tests (`envkit.envs.swe.grading`; the tree is untouched).

        A tree that cannot be frozen (over `Limits.repo_mb` / `Limits.repo_inodes`, the layer store full, a file
        system error) or graded (a layer that cannot be built) is a failed grade with the reason in `Grade.void`.
        """
        assert self.layers is not None and self.tree is not None
        try:
            stack = self.tree.freeze()
        except (OSError, RecursionError) as exc:
            return self._failed_grade(f"the work tree could not be frozen for grading: {exc}")
        try:
            self.last_grade = grade(
                self.backend,
                self.store,
                self.task,
                self.layers,
                stack,
                timeout=self.test_timeout,
                screen_diff=self.screen_diff,
                account=self.account,
            )
        except (OSError, RecursionError) as exc:
            return self._failed_grade(f"the work tree could not be graded: {exc}")
        finally:
            self.store.decref(stack)
        return self.last_grade

    def _failed_grade(self, why: str) -> Grade:
        self.last_grade = Grade(False, tuple(sorted(self.task.test_ids)), 0, why, (), (why[:2000],))
        return self.last_grade

    def _snapshot(self) -> SWEState:
        assert self.tree is not None
        before = self.tree.stack
        stack = self.tree.freeze()
        added = sum(self.store.usage_of(x)[0] for x in stack if x not in before)
        obs, info = self._last
        return SWEState(
            self.task.instance_id,
            stack,
            str(self.store.root),
            self.cwd,
            self.shell_env,
            self.t,
            obs,
            tuple(copy.deepcopy(info).items()),
            added,
        )

    def _restore(self, payload: Any, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        if not isinstance(payload, SWEState):
            raise SnapshotError(f"SWEEnv cannot restore a payload of type {type(payload).__name__}")
        if payload.task_id not in self._by_id:
            raise SnapshotError(f"snapshot of task {payload.task_id!r}, which this env's task list lacks")
        same_store = payload.store == str(self.store.root)
        if not same_store or not all(self.store.exists(x) for x in payload.stack):
            return self.restore_by_replay(snapshot)
        if self.account is None:  # restored before any reset: edits from here on are an episode too
            self._new_account()
        self._use_task(self._by_id[payload.task_id])
        assert self.tree is not None
        try:
            self.tree.mount(payload.stack)
        except OverlayError as exc:
            if exc.errno != errno.ENOENT:
                raise
            return self.restore_by_replay(snapshot)
        self.cwd, self.shell_env, self.t = payload.cwd, payload.env, payload.step
        self.last_grade = None
        self._last = (payload.obs, dict(payload.info))
        return payload.obs, dict(payload.info)

    def native_bytes(self, snapshot: Snapshot) -> int:
        """The disk the snapshot's freeze added to the layer store (`SWEState.disk_bytes`)."""
        payload = snapshot.payload[0] if isinstance(snapshot.payload, tuple) else None
        return payload.disk_bytes if isinstance(payload, SWEState) else 0

    def _discard(self, payload: Any) -> None:
        if isinstance(payload, SWEState) and payload.store == str(self.store.root):
            self.store.decref(payload.stack)

    def close(self) -> None:
        if self._gold is not None:
            self._gold[1].close()
            self._gold = None
        if self.tree is not None:
            self.tree.close()
            self.tree = None
        if self.account is not None:
            self.store.close_account(self.account)
            self.account = None
        self.backend.close()
        super().close()
