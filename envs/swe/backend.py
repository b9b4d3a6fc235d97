"""What every SWE shell backend shares: its limits, its result, the `Backend` base class, and the shell state.

A backend runs one bash command against a work tree on the host (mounted at ``WORKDIR`` inside) and keeps the
shell's state between commands the way a terminal would: the working directory and exported variables after each
command are returned in `CommandResult` (they are part of the env's snapshot) and passed to the next command.
`Backend.run` clamps the timeout, caps the output and says why a command was killed; the implementations
(`envkit.envs.swe.sandbox.LocalBackend`, `envkit.envs.swe.container.DockerBackend`) only start the command (`Backend._run`).
"""

from __future__ import annotations

import abc
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from envkit.envs.swe.sandbox_facts import SYSTEM_DIRS, SandboxError
from envkit.envs.swe.sandbox_facts import WORKDIR as WORKDIR  # re-exported: backends and tools import it from here

if TYPE_CHECKING:
    from envkit.envs.swe.environments import TaskEnvironment

_VOLATILE_VARS = {"PWD", "OLDPWD", "SHLVL", "_"}


@dataclass(frozen=True)
class Limits:
    """Resource limits of one command.

    Attributes:
        timeout_s: Default wall-clock limit of a command (a command may ask for less or up to `max_timeout_s`).
        max_timeout_s: Largest timeout a command may ask for.
        output_chars: Characters of output shown; longer output keeps its head and tail with a marker between.
        output_hard_bytes: Output beyond this kills the command (``yes`` cannot fill memory).
        memory_mb: Address-space limit (RLIMIT_AS) per process.
        nproc: Process limit of the sandbox uid (RLIMIT_NPROC).
        file_mb: Largest file a command may write (RLIMIT_FSIZE).
        tmp_mb: Size of the sandbox's private ``/tmp`` (a tmpfs).
        shm_mb: Size of the sandbox's private ``/dev/shm`` (a tmpfs).
        repo_mb: Size cap of everything written under ``/repo`` in one work tree (local backend: the overlay's
            upper dir is a tmpfs of this size). 0: no cap (the upper dir sits in the layer store; snapshots are a
            rename instead of a copy of the edits, but a command can fill the store's file system). A snapshot
            of edits whose apparent size (sparse files in full) is over it is refused.
        repo_inodes: Files and directories the edits to ``/repo`` may hold between snapshots (local backend: the
            upper dir's tmpfs has as many inodes; a snapshot of more is refused).
        snapshot_mb: Disk one episode's live snapshot layers may take together (allocated bytes in the layer
            store; every snapshot, the freeze before grading and the graded copy count until discarded). A
            snapshot beyond it is refused with `envkit.envs.swe.store_quota.StoreQuotaError`.
        snapshot_inodes: Files and directories one episode's live snapshot layers may hold together.
        episode_memory_mb: The one memory limit of an episode: all of its sandbox's processes, its ``/tmp`` and
            ``/dev/shm`` tmpfs and the edits held in ``/repo``'s tmpfs, together (local backend: the backend's
            memory cgroup; the kernel kills a process of the episode beyond it). 0: ``memory_mb + tmp_mb +
            shm_mb + repo_mb`` (7,232 MiB with the defaults: each part can be full at once).

    The local backend bounds the memory of all of a sandbox's processes together with a memory cgroup of
    `episode_memory_bytes` (tmpfs pages included) and refuses to start where it cannot make one
    (`envkit.envs.swe.sandbox.LocalBackend`).
    """

    timeout_s: float = 60.0
    max_timeout_s: float = 600.0
    output_chars: int = 16_000
    output_hard_bytes: int = 16 << 20
    memory_mb: int = 4096
    nproc: int = 512
    file_mb: int = 512
    tmp_mb: int = 1024
    shm_mb: int = 64
    repo_mb: int = 2048
    repo_inodes: int = 200_000
    snapshot_mb: int = 4096
    snapshot_inodes: int = 400_000
    episode_memory_mb: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s <= self.max_timeout_s:
            raise ValueError(f"Limits: need 0 < timeout_s <= max_timeout_s, got {self.timeout_s}, {self.max_timeout_s}")
        if self.output_chars < 200:
            raise ValueError(f"Limits.output_chars must be >= 200, got {self.output_chars}")
        positive = (self.memory_mb, self.nproc, self.file_mb, self.output_hard_bytes, self.tmp_mb, self.shm_mb)
        if (
            min(*positive, self.repo_inodes, self.snapshot_mb, self.snapshot_inodes) <= 0
            or min(self.repo_mb, self.episode_memory_mb) < 0
        ):
            raise ValueError(
                "Limits: memory_mb, nproc, file_mb, output_hard_bytes, tmp_mb, shm_mb, repo_inodes, snapshot_mb "
                "and snapshot_inodes must be positive, repo_mb and episode_memory_mb >= 0"
            )

    def episode_memory_bytes(self) -> int:
        """The episode's one memory limit in bytes (`episode_memory_mb`, or the sum of its parts when 0)."""
        mb = self.episode_memory_mb or (self.memory_mb + self.tmp_mb + self.shm_mb + self.repo_mb)
        return mb << 20


@dataclass(frozen=True)
class CommandResult:
    """What a command did.

    Attributes:
        output: Combined stdout and stderr (decoded, capped; see `Limits.output_chars`).
        exit_code: The shell's exit status (None when it was killed).
        timed_out: Killed at the wall-clock limit.
        cwd: Working directory after the command (unchanged if the shell exited early).
        env: Exported variables after the command, sorted.
    """

    output: str
    exit_code: int | None
    timed_out: bool
    cwd: str
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Command:
    """One command as `Backend.run` hands it to a backend's `Backend._run` (see `Backend.run` for each field).

    `timeout` is already clamped to ``limits.max_timeout_s`` and `chars` is the output to keep.
    """

    tree: str
    command: str
    cwd: str
    env: Mapping[str, str]
    timeout: float
    chars: int
    binds: Sequence[tuple[str, str, bool]] = ()


class Backend(abc.ABC):
    """Runs shell commands against a work tree on the host (mounted at ``WORKDIR`` inside).

    Subclasses set `name` and `limits` and implement `base_env`, `_run` and `close`.
    """

    name: str
    limits: Limits
    environment: TaskEnvironment | None = None

    def select(self, environment: TaskEnvironment | None) -> None:
        """Run the following commands in the task environment `environment` (None: the host's Python).

        Raises:
            SandboxError: this backend cannot provide it, or it is not built (the message names the command).
        """
        if environment is not None:
            raise SandboxError(f"the {self.name} backend cannot run task environments ({environment})")
        self.environment = None

    @abc.abstractmethod
    def base_env(self) -> dict[str, str]:
        """The environment a new shell starts with (for the selected task environment)."""

    def run(
        self,
        tree: str,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout: float,
        output_chars: int | None = None,
        binds: Sequence[tuple[str, str, bool]] = (),
    ) -> CommandResult:
        """Run `command` with bash in the sandbox on work tree `tree` (a host directory).

        Args:
            tree: Host directory shown at ``/repo``.
            command: Bash source (may span lines).
            cwd: Working directory to start in (falls back to ``/repo`` when it does not exist).
            env: The complete environment (from `base_env` or a previous `CommandResult.env`).
            timeout: Wall-clock seconds (clamped to ``limits.max_timeout_s``).
            output_chars: Characters of output to keep (default ``limits.output_chars``).
            binds: More ``(host dir, path inside, writable)`` binds (the grader's script and report dirs); host
                dirs must be reachable by the sandbox uid.
        """
        chars = output_chars or self.limits.output_chars
        timeout = max(0.1, min(float(timeout), self.limits.max_timeout_s))
        result, killed = self._run(Command(tree, command, cwd, env, timeout, chars, binds))
        note = ""
        if killed == "timeout":
            note = f"\n[command timed out after {timeout:g} s and was killed]"
        elif killed == "overflow":
            note = f"\n[command killed: output exceeded {self.limits.output_hard_bytes} bytes]"
        return replace(
            result,
            output=result.output + note,
            exit_code=None if killed else result.exit_code,
            timed_out=killed == "timeout",
        )

    @abc.abstractmethod
    def _run(self, c: Command) -> tuple[CommandResult, str]:
        """Run `c` and collect what it did: the result (output capped to ``c.chars``, `timed_out` left False) and
        why it was killed: ``""`` (it exited), ``"timeout"`` or ``"overflow"`` (more than
        ``limits.output_hard_bytes`` of output); `run` adds the note and clears the exit code of a killed one."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the backend holds (cgroups, the API client)."""


def cap_output(head: bytes, tail: bytes, total: int, limit: int) -> str:
    """Decode captured output and keep at most `limit` characters: head and tail with a marker between."""
    half = limit // 2
    if total <= len(head) + len(tail):  # nothing was dropped while reading
        text = (head + tail).decode("utf-8", "replace")
        if len(text) <= limit:
            return text
        return f"{text[:half]}\n[... {len(text) - 2 * half} characters of output omitted ...]\n{text[-half:]}"
    first = head.decode("utf-8", "replace")[:half]
    last = tail.decode("utf-8", "replace")[-half:]
    return f"{first}\n[... {total} bytes of output, the middle omitted ...]\n{last}"


def parse_state(raw: bytes, cwd: str, env: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Parse ``pwd`` + ``env -0`` as written by `shell_script`; fall back to the previous state."""
    if not raw:
        return cwd, tuple(sorted(env.items()))
    first, _, rest = raw.partition(b"\n")
    new_env: dict[str, str] = {}
    for item in rest.split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and key not in _VOLATILE_VARS and not key.startswith("BASH_FUNC_"):
            new_env[key] = value
    return first.decode("utf-8", "replace") or cwd, tuple(sorted(new_env.items()))


def python_roots() -> list[str]:
    roots = {
        os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(sys.executable)))
    }
    return sorted(r for r in roots if not any(r == d or r.startswith(d + "/") for d in SYSTEM_DIRS))


def sandbox_env(path_dirs: Sequence[str]) -> dict[str, str]:
    """The environment variables every sandboxed command starts with (both backends); `path_dirs` come first
    on ``PATH`` (the interpreter's ``bin`` directories)."""
    path = ":".join([*path_dirs, "/usr/local/bin", "/usr/bin", "/bin"])
    return {
        "PATH": path,
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "USER": "nobody",
    }
