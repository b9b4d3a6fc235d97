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
from envs.swe.tools import resolve

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


def reset_test_files(tree: str, files: Mapping[str, bytes | None], uid: int = 65534) -> None:
    """Write the pristine test files into `tree` (the agent's edits to them do not count)."""
    for rel, content in files.items():
        host = resolve(tree, rel, parents=True, uid=uid)
        if os.path.lexists(host) and (os.path.islink(host) or not os.path.isfile(host)):
            if os.path.isdir(host) and not os.path.islink(host):
                shutil.rmtree(host)
            else:
                os.unlink(host)
        if content is None:
            if os.path.lexists(host):
                os.unlink(host)
            continue
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
