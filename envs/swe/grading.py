"""Grade a work tree: the agent's package changes on the pristine task tree, the verdict decided here, on the host.

What is graded is not the agent's tree itself but a fresh overlay in a fresh sandbox: the task's pristine tree
with its tests and config (start + test patch) plus one layer holding only the agent's changes to an
**allow-list** (`gradable`): regular files with a source/data suffix inside a *package directory* of the
repository (`package_dirs`: a top-level or ``src/`` directory with an ``__init__.py`` in the pristine tree, or one
the gold patch edits), outside test paths, not ``conftest.py``/``setup.py``/``sitecustomize.py``/``pytest.py``
or another file Python or pytest reads as configuration, never under ``*.egg-info``/``*.dist-info``, never
``.pth``, never byte-code, hidden, a symlink or a FIFO. Everything else the agent changed (entry points, configs,
tests, build files, new top-level modules, ``__pycache__``) is dropped, and stale byte-code of a changed module
is hidden.

Before anything runs, the changed Python files are screened for harness tampering (`envkit.envs.swe.screen`):
a hit is a grade of 0 with the reason in `Grade.void`. pytest then runs in the sandbox under a supervisor
(`envkit.envs.swe.grade_runner`, which never imports the repository; its two scripts are copied per run into a
private directory made here with ``mkdtemp`` and removed after) and a pytest child
(`envkit.envs.swe.grade_session`). The supervisor reports *facts*, not a verdict: the kernel's exit status of
the pytest process, every report the child sent per required id, and why the run is void (the child's detectors:
audit hook, machinery fingerprint, plugin registrations, completion handshake). Its report is its last output
line, marked with a key made per run here and handed only to the supervisor. The rule is applied here
(`verdict`): the reward is 1 only when the run is not void, pytest exited with status 0 on its own, and every
FAIL_TO_PASS and PASS_TO_PASS id has exactly one setup and one teardown report and at least one call report
(subtests add theirs), all ``passed`` and none xfail-marked; xfail, xpass, skip, error, a missing or a duplicated report all fail. The rest of the output
is kept for people to read, never parsed.

Residual trust: the code under test runs inside the pytest process, and a process can always lie about itself;
what it can still do, and what no longer depends on it, is in docs/security.md ("SWE grading").
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import secrets
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from envkit.envs.swe.allow_list import gradable, package_dirs
from envkit.envs.swe.backend import WORKDIR, Backend, SandboxError
from envkit.envs.swe.layer_files import is_opaque, is_whiteout, walk
from envkit.envs.swe.layers import Account, LayerStore
from envkit.envs.swe.overlay import OverlayTree
from envkit.envs.swe.screen import SCREENED_SUFFIXES, screen
from envkit.envs.swe.tasks import SweTask, patch_paths
from envkit.envs.swe.workspace import TaskLayers, lookup

_GRADER_DIR = "/envkit-grader"
_VERDICT = "ENVKIT-VERDICT"


@dataclass(frozen=True)
class Grade:
    """The outcome of running a task's tests.

    Attributes:
        success: Every required test passed.
        failed: Required test ids that did not pass (sorted).
        passed: How many required test ids passed.
        output: The test run's output (capped; for people, never parsed).
        dropped: Paths the agent changed that grading ignored (test files, configs, byte-code, ...).
        void: Why the run does not count ("" entries never; empty when it counts): the static screen's findings
            (``screen: <file>: <what>``) or the runner's (audit hook, handshake, count mismatch).
    """

    success: bool
    failed: tuple[str, ...]
    passed: int
    output: str
    dropped: tuple[str, ...] = ()
    void: tuple[str, ...] = ()


def parse_pytest(output: str) -> dict[str, str]:
    """Test id -> status from pytest's ``-rA`` short summary (later lines win).

    For trusted offline runs only (the task generator); grading never parses output.
    """
    import re

    line_re = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (.+?)(?: - .*)?$")
    status: dict[str, str] = {}
    for line in output.splitlines():
        m = line_re.match(line.rstrip())
        if m:
            status[m.group(2)] = m.group(1)
    return status


def _changed_paths(store: LayerStore, layers: tuple[str, ...], base: tuple[str, ...]) -> set[str]:
    """Every file path the `layers` (overlay upper dirs) touch, incl. files of `base` under opaque dirs."""
    out: set[str] = set()
    for layer in layers:
        root = store.path(layer)
        for dirpath, dirnames, filenames in walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            rel_dir = "" if rel_dir == "." else rel_dir
            if rel_dir and is_opaque(dirpath):
                out |= _files_under(store, base, rel_dir)
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                rel = posixpath.join(rel_dir, name) if rel_dir else name
                out.add(rel)
                full = os.path.join(dirpath, name)
                if is_whiteout(os.lstat(full)):  # a deleted directory: its files are deleted too
                    out |= _files_under(store, base, rel)
            for d in dirnames:  # a whiteout of a directory is a file; a new dir hiding a file is a dir
                full = os.path.join(dirpath, d)
                if not os.path.islink(full):
                    rel = posixpath.join(rel_dir, d) if rel_dir else d
                    hidden = lookup(store, base, rel)
                    if hidden is not None and not os.path.isdir(hidden):
                        out.add(rel)
    return out


def _files_under(store: LayerStore, stack: tuple[str, ...], rel_dir: str) -> set[str]:
    """Files of `rel_dir` as `stack` shows it (for opaque directories in the agent's layers)."""
    out: set[str] = set()
    top = lookup(store, stack, rel_dir)
    if top is None or not os.path.isdir(top):
        return out
    seen: set[str] = set()
    for layer in stack:
        root = os.path.join(store.path(layer), rel_dir)
        if os.path.isdir(root) and not os.path.islink(root):
            for dirpath, _, filenames in walk(root):
                for name in filenames:
                    rel = posixpath.join(rel_dir, os.path.relpath(os.path.join(dirpath, name), root))
                    seen.add(posixpath.normpath(rel))
    for rel in seen:
        if lookup(store, stack, rel) is not None:
            out.add(rel)
    return out


def _mkdirs(root: str, rel_dir: str, uid: int) -> str:
    cur = root
    for part in [p for p in rel_dir.split("/") if p]:
        cur = os.path.join(cur, part)
        if not os.path.isdir(cur):
            os.mkdir(cur, 0o755)
            os.lchown(cur, uid, uid)
    return cur


def _whiteout(path: str) -> None:
    if not os.path.lexists(path):
        os.mknod(path, stat.S_IFCHR | 0o600, 0)


def source_layer(
    store: LayerStore,
    task: SweTask,
    layers: TaskLayers,
    stack: tuple[str, ...],
    uid: int = 65534,
    account: Account | None = None,
) -> tuple[str, tuple[str, ...]]:
    """A new layer with the agent's gradable changes (`stack` minus `layers.start`); returns (layer, dropped)."""
    start = layers.start
    if tuple(stack[: len(start)]) != tuple(start):
        raise ValueError("the work tree's stack does not start with the task's start layers")
    tests = layers.tests
    packages = task_packages(store, task, tests)
    test_files = frozenset(task.test_files())
    out = store.staging()
    os.lchown(out, uid, uid)
    dropped: list[str] = []
    for rel in sorted(_changed_paths(store, tuple(stack[len(start) :]), start)):
        if not gradable(rel, packages, test_files):
            dropped.append(rel)
            continue
        final = lookup(store, tuple(stack), rel)
        st = os.lstat(final) if final is not None else None
        dst_dir = _mkdirs(out, posixpath.dirname(rel), uid)
        dst = os.path.join(dst_dir, posixpath.basename(rel))
        if st is None:
            if lookup(store, tests, rel) is not None:
                _whiteout(dst)
        elif final is not None and stat.S_ISREG(st.st_mode):
            os.link(final, dst, follow_symlinks=False)  # layers are immutable: share the inode
        else:
            dropped.append(rel)
            continue
        if rel.endswith(".py"):  # hide byte-code compiled from the pristine version
            cache = lookup(store, tests, posixpath.join(posixpath.dirname(rel), "__pycache__"))
            if cache is not None and os.path.isdir(cache):
                stem = posixpath.basename(rel)[:-3] + "."
                for name in os.listdir(cache):
                    if name.startswith(stem) and name.endswith(".pyc"):
                        _whiteout(os.path.join(_mkdirs(dst_dir, "__pycache__", uid), name))
    return store.commit(out, store.new_id("g"), account=account), tuple(dropped)


def task_packages(store: LayerStore, task: SweTask, stack: tuple[str, ...]) -> frozenset[str]:
    """`package_dirs` of the pristine tree `stack` (the task's tests stack) and the task's gold patch."""
    names: set[str] = set()
    for layer in stack:
        root = store.path(layer)
        names.update(os.listdir(root))
        src = os.path.join(root, "src")
        if os.path.isdir(src) and not os.path.islink(src):
            names.update(f"src/{n}" for n in os.listdir(src))
    with_init = set()
    for rel in names:
        top = lookup(store, stack, rel)
        init = lookup(store, stack, rel + "/__init__.py")
        if top is not None and os.path.isdir(top) and not os.path.islink(top) and init is not None:
            with_init.add(rel)
    return package_dirs(frozenset(names), frozenset(with_init), tuple(patch_paths(task.patch)))


@contextlib.contextmanager
def private_runner_dir() -> Iterator[str]:
    """A per-run copy of the grader's two scripts: ``<mkdtemp>/run/{grade_runner,grade_session}.py``.

    The outer directory is made by ``mkdtemp`` (exclusive, 0700, owned by this process's user); the scripts are
    created exclusively (``O_EXCL|O_NOFOLLOW``) read-only, then the outer directory is opened to traversal only
    (0711: the sandbox's uid can reach ``run/`` by its random name, nobody can list or write) and ``run/`` is
    read-only (0555). Everything is removed when the block ends.
    """
    outer = tempfile.mkdtemp(prefix="envkit-swe-grade-")
    try:
        inner = os.path.join(outer, "run")
        os.mkdir(inner, 0o700)
        for name in ("grade_runner.py", "grade_session.py"):
            data = Path(__file__).with_name(name).read_bytes()
            fd = os.open(os.path.join(inner, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        os.chmod(inner, 0o555)
        os.chmod(outer, 0o711)
        yield inner
    finally:
        with contextlib.suppress(OSError):
            os.chmod(outer, 0o700)
            os.chmod(os.path.join(outer, "run"), 0o700)
        shutil.rmtree(outer, ignore_errors=True)


def pytest_args(test_command: str) -> list[str]:
    """The pytest options of a task's ``test_command`` (``python -m pytest ...`` or ``pytest ...``).

    Raises:
        SandboxError: the command is not a plain pytest invocation (the grader needs pytest's report hooks).
    """
    argv = shlex.split(test_command)
    for prefix in (["python", "-m", "pytest"], ["python3", "-m", "pytest"], ["pytest"], ["py.test"]):
        if argv[: len(prefix)] == prefix:
            return [a for a in argv[len(prefix) :] if a not in ("-p", "no:cacheprovider")] + ["-p", "no:cacheprovider"]
    raise SandboxError(
        f"the SWE grader runs pytest itself and needs a test_command of the form 'python -m pytest [options]', "
        f"got {test_command!r}"
    )


def read_report(output: str, key: str) -> tuple[dict[str, object] | None, str]:
    """(the supervisor's report, the output without it) from the sandbox's output; None when there is none."""
    marker = f"\n{_VERDICT} {key} "
    at = output.rfind(marker)
    if at < 0:
        return None, output
    line = output[at + len(marker) :].split("\n", 1)[0]
    try:
        data = json.loads(line)
    except ValueError:
        data = None
    return (data if isinstance(data, dict) else {"void": ["a malformed report from the grading runner"]}), output[:at]


def verdict(report: dict[str, object] | None, ids: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(failed required ids, void reasons) by the rule of the module docstring, from the supervisor's facts.

    `report["reports"]` maps each required id to its report counts (``setup``, ``call``, ``teardown``, and ``bad``:
    those not a plain pass). An id passes only when the run is not void, the pytest process exited by itself with
    status 0 or 1, and the id has exactly one ``setup``, at least one ``call`` (one per subtest, then the test's
    own) and exactly one ``teardown`` report, none of them failed, skipped or marked xfail; the grade is a success only when every id passes, and status 1 then (pytest saw a failure the reports
    do not show) voids the run.
    """
    if report is None:
        return tuple(sorted(set(ids))), (
            "no report from the grading runner (killed, timed out, or its output was cut)",
        )
    void = [str(v)[:500] for v in report.get("void") or []][:20]  # type: ignore[attr-defined]
    rc = report.get("exit")
    if rc not in (0, 1):  # 1: some test failed; anything else: interrupted, an internal error, no tests, a signal
        void.append(f"the pytest process exited with status {rc} (a negative one is a signal), not 0 or 1")
    reports = report.get("reports")
    reports = reports if isinstance(reports, dict) else {}
    failed = []
    for tid in sorted(set(ids)):
        got = reports.get(tid)
        ok = (
            isinstance(got, dict)
            and got.get("setup") == 1
            and got.get("teardown") == 1
            and isinstance(got.get("call"), int)
            and got["call"] >= 1  # one per subtest, then the test's own
            and got.get("bad") == 0  # no report of the id failed, skipped or xfail-marked
        )
        if void or not ok:
            failed.append(tid)
    if rc == 1 and not failed and not void:
        void.append("pytest exited with status 1 (a failure) although every required test reported a pass")
        failed = sorted(set(ids))
    if len(set(ids)) != len(ids):
        void.append("the task lists a required test id twice")
        failed = sorted(set(ids))
    return tuple(failed), tuple(void)


def changed_files(store: LayerStore, layer: str) -> list[str]:
    """The regular files of a graded source layer (the agent's kept changes), relative to the repository."""
    root = store.path(layer)
    out = []
    for dirpath, _, filenames in walk(root):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if stat.S_ISREG(os.lstat(full).st_mode):
                out.append(os.path.relpath(full, root))
    return sorted(out)


def screen_layer(store: LayerStore, layers: TaskLayers, layer: str, files: list[str]) -> tuple[str, ...]:
    """The static screen's findings for the changed Python files (see `envkit.envs.swe.screen`)."""
    found = []
    for rel in files:
        if not rel.endswith(SCREENED_SUFFIXES):
            continue
        new = Path(store.path(layer), rel).read_bytes()[: 8 << 20].decode("utf-8", "replace")
        pristine = lookup(store, layers.tests, rel)
        old = Path(pristine).read_bytes().decode("utf-8", "replace") if pristine and os.path.isfile(pristine) else None
        found += [f"screen: {rel}: {what}" for what in screen(new, old)]
    return tuple(found)


def grade(
    backend: Backend,
    store: LayerStore,
    task: SweTask,
    layers: TaskLayers,
    stack: tuple[str, ...],
    *,
    timeout: float,
    uid: int = 65534,
    screen_diff: bool = True,
    account: Account | None = None,
) -> Grade:
    """Grade the work-tree state `stack` (see the module docstring); the agent's tree is not touched.

    `screen_diff` False skips the static screen (for tests of the runtime layers only). The graded copy of the
    agent's changes is charged to `account` (the episode's, `envkit.envs.swe.store_quota`).
    """
    args = pytest_args(task.test_command)
    layer, dropped = source_layer(store, task, layers, stack, uid, account)
    files = changed_files(store, layer)
    screened = screen_layer(store, layers, layer, files) if screen_diff else ()
    if screened:
        store.delete(layer)
        return Grade(False, tuple(sorted(task.test_ids)), 0, "", dropped, screened)
    tree = OverlayTree(
        store,
        pinned=len(layers.tests) + 1,
        max_layers=len(layers.tests) + 2,
        uid=uid,
        size_mb=backend.limits.repo_mb or None,
        max_inodes=backend.limits.repo_inodes,
    )
    key = secrets.token_hex(16)
    try:
        try:
            tree.mount((*layers.tests, layer))
        except BaseException:
            store.delete(layer)
            raise
        child_env = {**backend.base_env(), "PYTHONDONTWRITEBYTECODE": "1"}
        config = {"key": key, "repo": WORKDIR, "args": args, "ids": list(task.test_ids), "changed": files}
        with private_runner_dir() as scripts:
            result = backend.run(
                tree.merged,
                f"exec python -I -B {_GRADER_DIR}/grade_runner.py",
                cwd=WORKDIR,
                env={**child_env, "ENVKIT_GRADE": json.dumps({**config, "env": child_env})},
                timeout=timeout,
                output_chars=1 << 20,
                binds=((scripts, _GRADER_DIR, False),),
            )
    finally:
        tree.close()
    report, output = read_report(result.output, key)
    failed, void = verdict(report, task.test_ids)
    passed = len(set(task.test_ids)) - len(failed)
    return Grade(not failed, failed, passed, output, dropped, void)
