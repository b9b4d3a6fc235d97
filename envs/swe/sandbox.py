"""Where the SWE env's shell commands run: one `envkit.envs.swe.backend.Backend` base class, two implementations.

- `LocalBackend` (default): bubblewrap, started unprivileged (`envkit.envs.swe.confine`: root forks, joins the
  backend's cgroups, sets rlimits and drops to uid 65534 before exec'ing ``/usr/bin/bwrap`` with a fixed
  environment). Each command runs in a fresh user namespace (that uid only, no nested user namespaces, no
  capabilities, bounding set empty, no-new-privs) with its own mount, PID, net (loopback only), IPC, UTS and
  cgroup namespaces; it sees the host's system directories and Python read-only, the work tree read-write at
  ``/repo`` and a private, sized tmpfs at ``/tmp``, under rlimits (memory, CPU seconds, processes per user
  namespace, file size, open files), a per-backend pids/memory cgroup where the kernel offers one, and a
  wall-clock timeout that kills the whole sandbox. The agent's cwd, command and variables reach only the
  sandboxed bash (through a file descriptor). Needs root, ``bwrap`` >= 0.8 and unprivileged user namespaces.
- `envkit.envs.swe.container.DockerBackend`: the same commands through the Docker Engine API (``docker`` SDK; works
  against Podman's Docker-compatible socket).

Both keep the shell's state between commands the way a terminal would: the working directory and exported
variables after each command are returned in `CommandResult` (they are part of the env's snapshot), and passed
to the next command.

Example:
    >>> b = LocalBackend()                                                  # doctest: +SKIP
    >>> r = b.run("/path/to/tree", "cd src && export X=1; ls", cwd="/repo", env=b.base_env())  # doctest: +SKIP
    >>> r.cwd, dict(r.env)["X"]                                             # doctest: +SKIP
    ('/repo/src', '1')
"""

from __future__ import annotations

import fcntl
import glob
import os
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence

from envkit.envs.swe.backend import (
    SYSTEM_DIRS,
    WORKDIR,
    Backend,
    Command,
    CommandResult,
    Limits,
    SandboxError,
    cap_output,
    parse_state,
    python_roots,
    sandbox_env,
)
from envkit.envs.swe.confine import TRUSTED_PATH, Cgroups, HostViews, drop_privileges, traversable
from envkit.envs.swe.environments import TaskEnvironment, venv_roots

_MASKED = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")  # hidden even from DAC mistakes
_STATE_MAX = 1 << 20  # a command's reported cwd + env larger than this is ignored (previous state kept)


def shell_script(state_fd: int, input_fd: int, nproc: int | None = None) -> str:
    """The bash prelude/trailer around a command.

    The prelude sets the process limit (before anything the agent wrote runs), reads the working directory, the
    command and the exported variables (NUL-separated) from `input_fd`, closes it, and runs the command; the
    trailer reports cwd and env on `state_fd`.
    """
    limit = f"ulimit -u {nproc} || exit 125\n" if nproc else ""
    return (
        limit + "{ IFS= read -r -d '' __envkit_cwd; IFS= read -r -d '' __envkit_cmd\n"
        "  while IFS= read -r -d '' __envkit_kv; do export -- \"$__envkit_kv\" 2>/dev/null; done; }"
        f" <&{input_fd}\n"
        f"exec {input_fd}<&-; unset __envkit_kv\n"
        'cd -- "$__envkit_cwd" 2>/dev/null || cd ' + WORKDIR + "\n"
        "unset __envkit_cwd\n"
        'eval "$__envkit_cmd"\n'
        "__envkit_rc=$?\n"
        f"{{ pwd; env -0; }} >&{state_fd} 2>/dev/null\n"
        "exit $__envkit_rc\n"
    )


def shell_input(cwd: str, command: str, env: Mapping[str, str]) -> bytes:
    """What `shell_script` reads: cwd, command and ``KEY=value`` items, each NUL-terminated (NULs dropped)."""
    items = [cwd, command, *(f"{k}={v}" for k, v in env.items() if k and "=" not in k)]
    return b"".join(x.replace("\0", "").encode("utf-8", "surrogateescape") + b"\0" for x in items)


def read_capped(proc: subprocess.Popen[bytes], deadline: float, keep: int, hard: int) -> tuple[bytes, bytes, int, str]:
    """Read `proc.stdout` until EOF or `deadline`.

    Returns:
        (head, tail, total bytes, why it stopped early: "" | "timeout" | "overflow").
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    head = bytearray()
    tail = bytearray()
    total = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(head), bytes(tail), total, "timeout"
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return bytes(head), bytes(tail), total, ""
        total += len(chunk)
        if len(head) < keep:
            take = keep - len(head)
            head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            tail = (tail + chunk)[-keep:]
        if total > hard:
            return bytes(head), bytes(tail), total, "overflow"


def args_pipe(args: Sequence[str]) -> int:
    """The read end of a pipe holding `args` NUL-separated, for ``bwrap --args FD``: the sandbox's pid 1 (bwrap)
    then shows ``bwrap --args N`` in ``/proc/1/cmdline``, not the host paths it binds, and once bwrap has read
    them the pipe is empty (its descriptor, if inherited, holds nothing)."""
    data = b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in args)
    r, w = os.pipe()
    try:
        if len(data) > 60_000:  # over a pipe's buffer: grow it (Linux F_SETPIPE_SZ)
            fcntl.fcntl(w, 1031, min(1 << 20, 1 << (len(data) - 1).bit_length()))
        view = memoryview(data)
        while view:
            view = view[os.write(w, view) :]
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return r


_BWRAP_OK: dict[str, bool] = {}


def _check_bwrap(path: str) -> None:
    """bubblewrap >= 0.8 (``--disable-userns``, ``--size``) is needed; checked once per binary."""
    if _BWRAP_OK.get(path):
        return
    out = subprocess.run([path, "--version"], capture_output=True, text=True, env={"PATH": TRUSTED_PATH}).stdout
    parts = out.split()[-1].split(".") if out.split() else []
    version = tuple(int(p) for p in parts if p.isdigit())
    if version < (0, 8):
        raise SandboxError(
            f"the SWE env's local backend needs bubblewrap >= 0.8 (--disable-userns, --size), found {out.strip()!r}: "
            "install a newer bubblewrap or use backend='docker'"
        )
    _BWRAP_OK[path] = True


#: Folders the sandbox mounts its own (private) file systems on: nothing of the host under them is visible inside.
SANDBOX_OWN_DIRS = ("/tmp", "/proc", "/dev", "/repo")


class LocalBackend(Backend):
    """bubblewrap sandbox (see the module docstring and `envkit.envs.swe.confine`).

    Args:
        limits: Resource limits.
        uid: The unprivileged host uid (and gid) commands run as; inside, the same id is the only one mapped.
        extra_ro_binds: More host directories to show read-only (same path inside).
        cgroups: Give the backend its own pids and memory cgroup (the memory one is required: without it the
            constructor raises `SandboxError` saying how to get one; False accepts per-process limits only).

    Attributes:
        isolation: Each isolation layer and whether it is on (``"on"``) or why not.
    """

    name = "local"

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        uid: int = 65534,
        extra_ro_binds: tuple[str, ...] = (),
        cgroups: bool = True,
    ):
        self.limits = limits or Limits()
        self.uid = uid
        found = {t: shutil.which(t, path=TRUSTED_PATH) for t in ("bwrap", "bash")}
        missing = [t for t, p in found.items() if p is None]
        if missing:
            raise SandboxError(
                f"the SWE env's local backend needs {', '.join(missing)} in {TRUSTED_PATH}: apt-get install "
                "bubblewrap bash (or use backend='docker')"
            )
        self._bwrap = os.path.realpath(str(found["bwrap"]))
        _check_bwrap(self._bwrap)
        if os.geteuid() != 0:
            raise SandboxError(
                "the SWE env's local backend needs root: it mounts overlayfs work trees (and cgroups) before "
                "dropping to an unprivileged uid for bubblewrap; run as root or use backend='docker'"
            )
        self._views = HostViews.get()
        self._extra = [os.path.realpath(p) for p in extra_ro_binds]
        self._binds = [d for d in SYSTEM_DIRS if os.path.exists(d)]
        self._prefix: list[str] = []
        self._ro: list[tuple[str, str]] = []
        self._hidden: list[str] = []  # directories shown empty (`select`: the base interpreter's site-packages)
        self._path: list[str] = []
        self._show(python_roots(), [f"{p}/bin" for p in python_roots()])
        self._masked = [p for p in _MASKED if os.path.exists(p)]
        self.cgroups: Cgroups | None = None
        reason = "off (cgroups=False)"
        if cgroups:
            self.cgroups = Cgroups(self.limits.nproc + 16, self.limits.episode_memory_bytes())
            reason = self.cgroups.reason
            if "memory" not in self.cgroups.dirs:
                self.cgroups.close()
                raise SandboxError(
                    "the SWE env's local backend bounds the memory of all of a sandbox's processes (and its tmpfs "
                    f"files) with a memory cgroup, and cannot make one here ({reason}); RLIMIT_AS alone bounds "
                    "each process, not their sum. Delegate the memory controller to this process's cgroup (cgroup "
                    "v2: add 'memory' to cgroup.subtree_control of the parent; v1: mount the memory hierarchy), use "
                    "backend='docker', or accept per-process limits only with LocalBackend(cgroups=False)"
                )
        self.isolation = {
            "user_namespace": "on (no nested user namespaces)",
            "pid_namespace": "on",
            "capabilities": "none (bounding set empty)",
            "cgroup": "on: " + ", ".join(sorted(self.cgroups.dirs)) if self.cgroups and self.cgroups.dirs else "",
            "cgroup_missing": reason,
            "tmp_size_mb": str(self.limits.tmp_mb),
            "shm_size_mb": str(self.limits.shm_mb),
            "aggregate_memory": f"memory cgroup: {self.limits.episode_memory_bytes() >> 20} MiB for all processes, /tmp, "
            "/dev/shm and /repo edits together"
            if self.cgroups
            else "none (cgroups=False: RLIMIT_AS per process only)",
        }

    def _show(self, roots: list[str], path: list[str], hidden: Sequence[str] = ()) -> None:
        self._prefix, self._path, self._hidden = roots, path, [h for h in hidden if os.path.isdir(h)]
        self._ro = [(self._views.source(r, self.uid, self.uid), r) for r in [*roots, *self._extra]]

    def select(self, environment: TaskEnvironment | None) -> None:
        """Show the task's venv (`TaskEnvironment.prefix_dir`) instead of the host's Python, or the host's (None).

        Raises:
            SandboxError: the environment has only an image, or its prefix is not built (names the command).
        """
        if environment == self.environment:
            return
        if environment is None:
            self._show(python_roots(), [f"{p}/bin" for p in python_roots()])
        else:
            prefix = environment.prefix_dir()
            if prefix is None:
                raise SandboxError(
                    f"the task's environment is the image {environment.image!r}, which the local backend cannot "
                    "run: use backend='docker'"
                )
            if not (prefix / "pyvenv.cfg").exists():
                raise SandboxError(
                    f"the task's environment prefix {prefix} does not exist: build it with "
                    f"`{environment.build_hint('prefix')}`"
                )
            shadowed = [d for d in SANDBOX_OWN_DIRS if prefix.resolve().is_relative_to(d)]
            if shadowed:
                raise SandboxError(
                    f"the task's environment prefix {prefix} is under {shadowed[0]}, which the sandbox replaces with "
                    "its own: build it elsewhere (set ENVKIT_SWE_ENVS to a folder outside /tmp, /dev, /proc and /repo)"
                )
            roots = venv_roots(prefix)
            # the venv runs its base interpreter, whose prefix is bound whole: hide that prefix's own site-packages
            # (the host's packages when the base is the machine's Python), so only the task's pins are there
            base_sites = [
                site
                for r in roots
                if not r.startswith(str(prefix.resolve()))
                for site in glob.glob(f"{r}/lib/python3*/site-packages")
            ]
            self._show(roots, [str(prefix / "bin")], base_sites)
        self.environment = environment

    def base_env(self) -> dict[str, str]:
        return sandbox_env(self._path)

    def _argv(self, tree: str, state_fd: int, input_fd: int, binds: Sequence[tuple[str, str, bool]] = ()) -> list[str]:
        argv = [self._bwrap, "--unshare-user", "--uid", str(self.uid), "--gid", str(self.uid), "--disable-userns"]
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--cap-drop", "ALL"]
        for d in self._binds:
            argv += ["--ro-bind", d, d]
        made: set[str] = set()
        for src, root in self._ro:
            parts = root.strip("/").split("/")
            for i in range(1, len(parts)):
                anc = "/" + "/".join(parts[:i])
                if anc not in made:
                    made.add(anc)
                    argv += ["--perms", "0755", "--dir", anc]
            argv += ["--ro-bind", src, root]
        for p in self._masked:
            argv += ["--ro-bind", "/dev/null", p]
        for d in self._hidden:  # the base interpreter's own site-packages under a task's venv: an empty, read-only dir
            argv += ["--perms", "0555", "--tmpfs", d, "--remount-ro", d]
        argv += ["--bind", tree, WORKDIR, "--perms", "1777", "--size", str(self.limits.tmp_mb << 20)]
        # SANDBOX_OWN_DIRS: the sandbox's own /tmp, /proc and /dev (and the work tree at /repo above)
        argv += ["--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
        argv += [
            "--perms",
            "1777",
            "--size",
            str(self.limits.shm_mb << 20),
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
        ]
        argv += ["--chdir", "/", "--clearenv"]
        for host, inside, writable in binds:
            argv += ["--bind" if writable else "--ro-bind", host, inside]
        argv += ["--setenv", "PATH", TRUSTED_PATH, "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8"]
        argv += [
            "--remount-ro",
            "/",
            "--",
            "/bin/bash",
            "--noprofile",
            "--norc",
            "-c",
            shell_script(state_fd, input_fd, self.limits.nproc),
        ]
        return argv

    def _rlimits(self, cpu_seconds: int) -> dict[int, int]:
        mb = 1 << 20
        return {
            resource.RLIMIT_CPU: cpu_seconds,
            resource.RLIMIT_AS: self.limits.memory_mb * mb,
            resource.RLIMIT_FSIZE: self.limits.file_mb * mb,
            resource.RLIMIT_CORE: 0,
            resource.RLIMIT_NOFILE: 1024,
        }

    def _run(self, c: Command) -> tuple[CommandResult, str]:
        tree, command, cwd, env, timeout, chars, binds = c.tree, c.command, c.cwd, c.env, c.timeout, c.chars, c.binds
        cpu = int(timeout) + 5
        view = None if traversable(tree, self.uid, self.uid) else self._views.temporary(tree)
        procs = self.cgroups.procs_files() if self.cgroups else []
        rlimits = self._rlimits(cpu)
        try:
            with tempfile.TemporaryFile() as state, tempfile.TemporaryFile() as given:
                given.write(shell_input(cwd, command, env))
                given.flush()
                given.seek(0)
                fd, in_fd = state.fileno(), given.fileno()
                argv = self._argv(view or tree, fd, in_fd, binds)
                cut = argv.index("--")  # options (host paths) through the pipe, the command (no paths) in argv
                args_fd = args_pipe(argv[1:cut])
                try:
                    proc = subprocess.Popen(
                        [self._bwrap, "--args", str(args_fd), *argv[cut:]],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        pass_fds=(fd, in_fd, args_fd),
                        start_new_session=True,
                        env={"PATH": TRUSTED_PATH, "LANG": "C.UTF-8"},
                        preexec_fn=lambda: drop_privileges(self.uid, rlimits, procs),
                    )
                finally:
                    os.close(args_fd)
                try:
                    head, tail, total, why = read_capped(
                        proc, time.monotonic() + timeout, 4 * chars, max(self.limits.output_hard_bytes, 4 * chars)
                    )
                finally:
                    if proc.poll() is None:
                        try:
                            os.killpg(proc.pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    code = proc.wait()
                    if self.cgroups:
                        self.cgroups.kill_all()
                    assert proc.stdout is not None
                    proc.stdout.close()
                state.seek(0)
                raw = state.read(_STATE_MAX + 1)
        finally:
            if view is not None:
                self._views.release(view)
        if code != 0 and head.startswith(b"bwrap:") and not why:
            msg = head.decode(errors="replace").strip()
            hint = (
                " (unprivileged user namespaces are disabled: sysctl user.max_user_namespaces=N>0, and on Ubuntu "
                "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)"
                if "uid map" in msg or "user namespace" in msg or "No permissions" in msg
                else ""
            )
            raise SandboxError(f"bubblewrap could not start the sandbox: {msg}{hint}")
        new_cwd, new_env = parse_state(b"" if len(raw) > _STATE_MAX else raw, cwd, env)
        return CommandResult(cap_output(head, tail, total, chars), code, False, new_cwd, new_env), why

    def close(self) -> None:
        """Kill strays and remove the backend's cgroups."""
        if self.cgroups:
            self.cgroups.close()
