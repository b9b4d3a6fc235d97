"""Grade a work tree: reset the test files, run the task's tests in the sandbox, read pytest's verdicts.

The reward is 1 when every FAIL_TO_PASS and PASS_TO_PASS test id is reported PASSED (or XFAIL, as SWE-bench
counts it) by pytest's ``-rA`` summary, else 0. A test id missing from the report (not collected, file broken,
timeout) counts as failed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from envs.swe.sandbox import WORKDIR, Backend
from envs.swe.tasks import Task

_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (.+?)(?: - .*)?$")
_OK = {"PASSED", "XFAIL"}


@dataclass(frozen=True)
class Grade:
    """The outcome of running a task's tests.

    Attributes:
        success: Every required test passed.
        failed: Required test ids that did not pass (sorted).
        passed: How many required test ids passed.
        output: The test run's output (capped).
    """

    success: bool
    failed: tuple[str, ...]
    passed: int
    output: str


def parse_pytest(output: str) -> dict[str, str]:
    """Test id -> status from pytest's ``-rA`` short summary (later lines win)."""
    status: dict[str, str] = {}
    for line in output.splitlines():
        m = _LINE.match(line.rstrip())
        if m:
            status[m.group(2)] = m.group(1)
    return status


def _clear_way(tree: str, rel: str, uid: int) -> str:
    """Make every parent of `rel` a real directory (removing files or symlinks in the way); return the host path."""
    cur = tree
    parts = [p for p in rel.split("/") if p]
    for part in parts[:-1]:
        cur = os.path.join(cur, part)
        if os.path.islink(cur) or (os.path.lexists(cur) and not os.path.isdir(cur)):
            os.unlink(cur)
        if not os.path.lexists(cur):
            os.mkdir(cur, 0o755)
            os.lchown(cur, uid, uid)
    host = os.path.join(cur, parts[-1])
    if os.path.isdir(host) and not os.path.islink(host):
        shutil.rmtree(host)
    elif os.path.lexists(host):
        os.unlink(host)
    return host


def reset_test_files(tree: str, files: Mapping[str, bytes | None], uid: int = 65534) -> None:
    """Write the pristine test files into `tree` (the agent's edits to them, or to their paths, do not count)."""
    for rel, content in files.items():
        host = _clear_way(tree, rel, uid)
        if content is not None:
            with open(host, "wb") as f:
                f.write(content)
            os.lchown(host, uid, uid)


def grade(
    backend: Backend,
    tree: str,
    task: Task,
    test_files: Mapping[str, bytes | None],
    *,
    timeout: float,
    uid: int = 65534,
) -> Grade:
    """Reset test files, run ``task.test_command`` on the required ids in the sandbox, and grade the result."""
    reset_test_files(tree, test_files, uid)
    command = task.test_command + " " + " ".join(shlex.quote(t) for t in task.test_ids)
    result = backend.run(tree, command, cwd=WORKDIR, env=backend.base_env(), timeout=timeout, output_chars=4 << 20)
    status = parse_pytest(result.output)
    failed = tuple(sorted(t for t in task.test_ids if status.get(t) not in _OK))
    passed = len(task.test_ids) - len(failed)
    return Grade(not failed, failed, passed, result.output)
