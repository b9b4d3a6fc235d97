"""What the SWE task environments and the shell backends agree on: where the work tree is mounted inside the
sandbox, which host directories are the system's, and the error of a sandbox that cannot start.

They sit below both `envkit.envs.swe.environments` (which names them in a task environment) and
`envkit.envs.swe.backend` (which runs commands in one), so neither imports the other back.
"""

from __future__ import annotations

from envkit.errors import EnvkitError

#: Where a task's work tree is mounted inside the sandbox (a `TaskEnvironment`'s default ``workdir``).
WORKDIR = "/repo"

#: Host directories that hold the system itself (never a task's interpreter prefix).
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxError(EnvkitError, RuntimeError):
    """The sandbox could not start (missing tool, missing privilege); the message says how to fix it."""
