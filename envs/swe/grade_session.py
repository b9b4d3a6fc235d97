"""The pytest process of a grading run (started by `envkit.envs.swe.grade_runner`; never imported by envkit).

Usage: ``python -I -B grade_session.py`` with the runner's socket on fd 3. Nothing about the run is in argv,
the environment or a file: the configuration (repository, pytest arguments with the test ids, the files the
agent changed) arrives over the socket, which is then moved to a random high descriptor. Before the repository
joins ``sys.path`` this process imports pytest, pluggy, ctypes and the standard library it needs, binds its
helpers privately (``marshal.dumps``, ``os.write``, ``os._exit``) and installs an audit hook that *voids* the
run, on the spot (a message to the runner that nothing can take back), when code the agent wrote (a changed
file, a file outside the installed Python and the pristine repository, ``exec``'d text) uses a primitive that a
forgery needs: frames (``sys._getframe``, ``tb_frame``/``gi_frame``, ``sys._current_frames``), ``gc``
introspection, ``ctypes``, ``/proc/self`` and ``/dev/fd``, tracing and profiling hooks, new code objects,
``compile`` under a trusted file name, ``os._exit``, ``atexit`` or a signal handler before the session ends,
another audit hook.
The channel is guarded by a seccomp filter installed before any of the repository's code runs: ``dup2``,
``dup3``, ``close``, ``close_range``, ``dup``, ``shutdown`` and ``fcntl(F_DUPFD)`` on its descriptor fail (and so does every
system call of another ABI), so nothing in this process can silence, replace or hand on the channel; what this
process writes to it is all the runner sees, and the detectors' messages always arrive. The audit hook also
voids the run when this process is replaced (``os.exec*``), when text is compiled under the name of a trusted
file it is not the content of (``SourceFileLoader.source_to_code`` under a standard-library name), and when
marshalled code carrying a trusted file name is loaded from anywhere but a trusted byte-code cache.
Per-test reports go to the runner as they happen; the test machinery (pytest, pluggy, ``contextlib``, ...) is
fingerprinted for monkeypatching after every teardown, every module of the interpreter's own libraries when
collection has finished and at the end, and every registered hook implementation must come from trusted code
(pytest's own plugins, installed ones, the task's pristine conftest files): a plugin the code under test
registers (through ``_pytest.assertion.util._config``, an entry point, ``gc``) voids the run. At the end the session's own counts and exit status go to the runner, which answers with
a one-time nonce; only a completion message carrying that nonce (and the same exit status the process then
exits with) makes the run count. All state lives in `_main`'s frame and closures, nothing on ``__main__``.
"""


def guard_channel(chan: int) -> str:
    """Install the seccomp filter of the module docstring for descriptor `chan`; returns "" or why it failed."""
    import ctypes
    import platform
    import struct

    machine = platform.machine()
    if machine in ("x86_64", "AMD64"):
        arch, x32 = 0xC000003E, True
        nrs = {"close": 3, "dup": 32, "dup2": 33, "fcntl": 72, "shutdown": 48, "dup3": 292, "close_range": 436}
    elif machine in ("aarch64", "arm64"):
        arch, x32 = 0xC00000B7, False
        nrs = {"close": 57, "dup": 23, "fcntl": 25, "shutdown": 210, "dup3": 24, "close_range": 436}
    else:
        return f"no channel guard for machine {machine!r}"
    ld, jeq, jge, jgt, ret = 0x20, 0x15, 0x35, 0x25, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM

    def arg(i: int) -> int:
        return 16 + 8 * i  # low 32 bits of seccomp_data.args[i] (little-endian)

    prog: list = []  # type: ignore[type-arg]
    prog += [("ld", 4), ("jeq", arch, "nr", "deny"), ("label", "nr"), ("ld", 0)]
    if x32:
        prog += [("jge", 0x40000000, "deny", "sw")]
    prog += [("label", "sw")]
    targets = {"close": "a0", "dup": "a0", "shutdown": "a0", "dup2": "a1", "dup3": "a1", "fcntl": "fcntl"}
    targets["close_range"] = "range"
    names = [n for n in targets if n in nrs]
    for i, name in enumerate(names):
        prog += [("jeq", nrs[name], targets[name], f"n{i}"), ("label", f"n{i}")]
    prog += [("ret", allow)]
    prog += [("label", "a0"), ("ld", arg(0)), ("jeq", chan, "deny", "allow")]
    prog += [("label", "a1"), ("ld", arg(1)), ("jeq", chan, "deny", "allow")]
    prog += [("label", "fcntl"), ("ld", arg(0)), ("jeq", chan, "fcmd", "allow")]
    prog += [("label", "fcmd"), ("ld", arg(1)), ("jeq", 0, "deny", "fc2"), ("label", "fc2")]
    prog += [("jeq", 1030, "deny", "allow")]  # F_DUPFD, F_DUPFD_CLOEXEC
    prog += [("label", "range"), ("ld", arg(0)), ("jgt", chan, "allow", "r2")]
    prog += [("label", "r2"), ("ld", arg(1)), ("jge", chan, "deny", "allow")]
    prog += [("label", "allow"), ("ret", allow), ("label", "deny"), ("ret", deny)]
    where: dict[str, int] = {}
    n = 0
    for ins in prog:
        if ins[0] == "label":
            where[ins[1]] = n
        else:
            n += 1
    code = b""
    n = 0
    for ins in prog:
        op = ins[0]
        if op == "label":
            continue
        if op == "ld":
            code += struct.pack("=HBBI", ld, 0, 0, ins[1])
        elif op == "ret":
            code += struct.pack("=HBBI", ret, 0, 0, ins[1])
        else:
            jt, jf = where[ins[2]] - n - 1, where[ins[3]] - n - 1
            code += struct.pack("=HBBI", {"jeq": jeq, "jge": jge, "jgt": jgt}[op], jt, jf, ins[1])
        n += 1

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    buf = ctypes.create_string_buffer(code, len(code))
    fprog = Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_char_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(38, 1, None, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return f"PR_SET_NO_NEW_PRIVS failed (errno {ctypes.get_errno()})"
    if libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return f"the seccomp filter could not be installed (errno {ctypes.get_errno()})"
    import os

    try:
        os.close(os.dup(chan))
    except OSError:
        return ""
    return "the seccomp filter did not hold (dup of the channel succeeded)"


def _main() -> None:
    import _signal
    import atexit
    import marshal
    import os
    import posix
    import secrets
    import signal
    import sys
    import sysconfig
    import threading

    sys.dont_write_bytecode = True
    import ctypes  # noqa: F401  (imported now so that importing it later is not a dlopen by the code under test)

    import _pytest.runner  # noqa: F401
    import pytest

    dumps, write, read, real_exit, getframe = marshal.dumps, os.write, os.read, os._exit, sys._getframe
    loads, current_frames, lstat = marshal.loads, sys._current_frames, os.stat
    realpath, fsdecode = os.path.realpath, os.fsdecode

    def recv_exact(fd: int, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = read(fd, n - len(out))
            if not chunk:
                real_exit(97)
            out += chunk
        return out

    # ----- the channel: fd 3 -> a random free descriptor ------------------------------------------------------
    chan = 3
    for _ in range(64):
        target = 200 + secrets.randbelow(800)
        try:
            os.fstat(target)
        except OSError:
            os.dup2(3, target, inheritable=False)
            os.close(3)
            chan = target
            break
    size = int.from_bytes(recv_exact(chan, 4), "big")
    cfg = loads(recv_exact(chan, size))
    guard_error = guard_channel(chan)
    repo: str = cfg["repo"]
    prefix = repo.rstrip("/") + "/"
    changed = frozenset(prefix + p for p in cfg["changed"])

    def send(msg: tuple) -> None:  # type: ignore[type-arg]
        data = dumps(msg)
        data = len(data).to_bytes(4, "big") + data
        while data:
            data = data[write(chan, data) :]

    # ----- who wrote a frame's code ---------------------------------------------------------------------------
    roots = {os.path.dirname(os.path.abspath(__file__)) + "/"}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        roots.add(os.path.realpath(sysconfig.get_paths()[key]) + "/")
        roots.add(sysconfig.get_paths()[key] + "/")
    # and every import root the interpreter started with (before the repository joins sys.path; -I: no cwd, no
    # PYTHONPATH): a distribution's Python keeps its packages outside sysconfig's scheme (Debian's
    # /usr/lib/python3/dist-packages in a task image), all read-only to the agent
    for entry in sys.path:
        if (
            entry
            and os.path.isdir(entry)
            and not os.path.realpath(entry).startswith(("/tmp/", "/dev/"))
            and entry != "/"
        ):
            roots.update({os.path.realpath(entry) + "/", os.path.abspath(entry) + "/"})
    trusted_roots = tuple(sorted(r for r in roots if not r.startswith(prefix)))
    pristine: dict[str, tuple[int, int, int]] = {}
    todo = [repo]
    while todo:  # no os.walk: it recurses (a 1,100-level directory would raise RecursionError)
        with os.scandir(todo.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    todo.append(e.path)
                elif e.name.endswith((".py", ".pyx", ".pyc")) and e.path not in changed:
                    st = e.stat(follow_symlinks=False)
                    pristine[e.path] = (st.st_ino, st.st_size, st.st_mtime_ns)

    def untrusted(filename: str) -> bool:
        if filename.startswith("<frozen "):
            return False
        if filename.startswith(prefix):
            if filename in changed or filename not in pristine:
                return True
            try:
                st = lstat(filename, follow_symlinks=False)
            except OSError:
                return True
            return (st.st_ino, st.st_size, st.st_mtime_ns) != pristine[filename]
        return not filename.startswith(trusted_roots)

    state = {"void": "", "ended": False, "busy": False}
    main_pid = os.getpid()
    real_open = open  # bound before anything can patch it

    def read_bytes(path: str) -> bytes:
        with real_open(path, "rb") as f:
            return f.read()

    def void(reason: str) -> None:
        if not state["void"]:
            state["void"] = reason
            send(("V", reason))

    if guard_error:
        void(f"the channel guard is missing: {guard_error}")

    def trusted_name(name: str) -> bool:
        """A file name whose code the hook trusts (a trusted root or a pristine repository file)."""
        return bool(name) and not name.startswith("<") and not untrusted(name)

    def is_real_file_text(name: str, source: object) -> bool:
        """True when `source` (str or bytes) is the content of file `name` (or `name` lies inside an archive)."""
        try:
            data = read_bytes(name)
        except OSError:
            head = name
            while head not in ("", "/"):  # a zip archive on the path (zipimport): not checked
                head = os.path.dirname(head)
                if os.path.isfile(head):
                    return True
            return False
        if isinstance(source, (bytes, bytearray, memoryview)):
            return bytes(source) == data
        if isinstance(source, str):
            import importlib.util

            return source in (importlib.util.decode_source(data), data.decode("utf-8", "replace"))
        return False

    def code_names(obj: object, depth: int = 0) -> list[str]:
        if depth > 50:
            return []
        names = [str(getattr(obj, "co_filename", ""))] if hasattr(obj, "co_consts") else []
        for const in getattr(obj, "co_consts", ()) or ():
            if hasattr(const, "co_consts"):
                names += code_names(const, depth + 1)
        return names

    def marshal_ok(caller, data: object) -> bool:  # type: ignore[no-untyped-def]
        """Marshalled data may carry code under a trusted name only from a trusted or pristine byte-code file."""
        if caller is not None and caller.f_code.co_name == "_compile_bytecode":
            path = str(caller.f_locals.get("bytecode_path") or "")
            if path.startswith(trusted_roots) or (path.startswith(prefix) and not untrusted(path)):
                return True
        try:
            obj = loads(bytes(data))  # type: ignore[call-overload]
        except Exception:  # whatever it is, it is no code under a trusted name
            return True
        return not any(trusted_name(n) for n in code_names(obj))

    def stack_untrusted(frame, depth: int = 10_000) -> str:  # type: ignore[no-untyped-def]
        while frame is not None and depth > 0:
            name = frame.f_code.co_filename
            if untrusted(name):
                return name
            frame, depth = frame.f_back, depth - 1
        return ""

    def module_of(frame) -> str:  # type: ignore[no-untyped-def]
        return str(frame.f_globals.get("__name__", "")) if frame is not None else ""

    launder = ("inspect", "traceback", "logging")
    frame_attrs = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
    proc_self = ("/proc/self/", "/proc/thread-self/", f"/proc/{os.getpid()}/", "/dev/fd/", f"/proc/{os.getppid()}/")
    anywhere = frozenset(
        {
            "gc.get_objects",
            "gc.get_referrers",
            "gc.get_referents",
            "sys._current_frames",
            "sys.settrace",
            "sys.setprofile",
            "sys.addaudithook",
            "code.__new__",
            "function.__new__",
        }
    )
    watched = anywhere | {"sys._getframe", "object.__getattr__", "open", "os.listdir", "os.scandir", "compile"}
    watched |= {"os.exec", "marshal.loads", "marshal.load"}

    def hook(event: str, args: tuple) -> None:  # type: ignore[type-arg]
        if event not in watched and not event.startswith("ctypes."):
            return
        if state["busy"] or state["void"]:
            return
        if event == "os.exec":  # the pytest process replaced: its session can never end honestly
            if os.getpid() == main_pid:
                void("os.exec* replaced the pytest process")
            return
        if event in ("compile", "marshal.loads", "marshal.load"):
            state["busy"] = True
            try:
                if event == "compile":
                    source, name = (args[0], args[1]) if len(args) > 1 else (None, "")
                    name = fsdecode(name) if isinstance(name, (str, bytes)) else str(name)
                    text = isinstance(source, (str, bytes, bytearray, memoryview))
                    python_file = name.endswith((".py", ".pyw")) or not os.path.exists(name)
                    if trusted_name(name) and text and python_file:  # (templates compile under their own names)
                        if not is_real_file_text(name, source):
                            void(f"text compiled under the name of {name}, which it is not the content of")
                            return
                    elif trusted_name(name) and stack_untrusted(getframe(1)):
                        void(f"code compiled under the trusted name {name} by the code under test")
                        return
                elif event == "marshal.load":  # from a file object: not read here
                    culprit = stack_untrusted(getframe(1))
                    if culprit:
                        void(f"marshal.load used by {culprit}")
                        return
                elif args and not marshal_ok(getframe(1), args[0]):
                    void("marshalled code under a trusted file name loaded from outside a trusted byte-code cache")
                    return
            finally:
                state["busy"] = False
            if event != "compile":
                return
        if event == "object.__getattr__" and (len(args) < 2 or args[1] not in frame_attrs):
            return
        if event in ("open", "os.listdir", "os.scandir"):
            path = args[0] if args else None
            if isinstance(path, int) or path is None:
                return
            state["busy"] = True
            try:  # symlinks, relative paths and path objects resolved: /tmp/x -> /proc/self/mem is /proc/<pid>/mem
                path = realpath(fsdecode(path))
            except (TypeError, ValueError, OSError):
                path = ""
            finally:
                state["busy"] = False
            if not (path.rstrip("/") + "/").startswith(proc_self):
                return
        state["busy"] = True
        try:
            caller = getframe(1)
            if event in ("sys._getframe", "object.__getattr__", "compile", "code.__new__", "function.__new__"):
                culprit = caller.f_code.co_filename if untrusted(caller.f_code.co_filename) else ""
                if not culprit and module_of(caller).split(".")[0] in launder and caller.f_back is not None:
                    back = caller.f_back.f_code.co_filename
                    culprit = back if untrusted(back) else ""
                if event == "compile" and culprit:
                    name = str(args[1]) if len(args) > 1 else ""
                    if not (name.startswith(("<frozen", *trusted_roots)) or name in pristine):
                        culprit = ""  # compiling under its own name is an import of the agent's code
            else:
                culprit = stack_untrusted(caller)
            if culprit:
                void(f"{event} used by {culprit}")
        finally:
            state["busy"] = False

    sys.addaudithook(hook)

    def guarded_exit(code: int = 0) -> None:
        if not state["ended"]:
            void("os._exit called before the test session ended")
        real_exit(code)

    real_register = atexit.register

    def guarded_register(fn, *a, **k):  # type: ignore[no-untyped-def]
        if untrusted(getframe(1).f_code.co_filename):
            void("atexit.register used by the code under test")
        return real_register(fn, *a, **k)

    real_signal = signal.signal

    def guarded_signal(signum, handler):  # type: ignore[no-untyped-def]
        if callable(handler) and untrusted(getframe(1).f_code.co_filename):
            void("signal.signal used by the code under test (a handler receives the running frame)")
        return real_signal(signum, handler)

    os._exit = posix._exit = guarded_exit  # type: ignore[assignment]
    atexit.register = guarded_register  # type: ignore[assignment]
    signal.signal = _signal.signal = guarded_signal  # type: ignore[assignment]

    # ----- the machinery's fingerprint ------------------------------------------------------------------------
    watched_modules = (
        "builtins",
        "operator",
        "marshal",
        "unittest.case",
        "_pytest.runner",
        "_pytest.reports",
        "_pytest.python",
        "_pytest.python_api",
        "_pytest.outcomes",
        "_pytest.main",
        "_pytest.unittest",
        "_pytest.skipping",
        "_pytest.fixtures",
        "pluggy._hooks",
        "pluggy._callers",
        "pluggy._manager",
        "pytest",
        "contextlib",
        "functools",
    )
    for mname in watched_modules:
        try:
            __import__(mname)
        except ImportError:
            pass

    def fingerprint() -> dict[tuple[str, ...], object]:
        out: dict[tuple[str, ...], object] = {}
        for mname in watched_modules:
            mod = sys.modules.get(mname)
            if mod is None:
                continue
            for key, value in list(vars(mod).items()):
                if not (callable(value) or isinstance(value, type)):
                    continue
                out[(mname, key)] = value
                if isinstance(value, type) and mname != "builtins" and getattr(value, "__module__", "") == mname:
                    for ckey, cvalue in list(vars(value).items()):
                        if callable(cvalue) or isinstance(cvalue, (staticmethod, classmethod, property)):
                            out[(mname, key, ckey)] = cvalue
        return out

    def code_file(value: object) -> str:
        for attr in ("__func__", "fget", "func", "__wrapped__"):
            value = getattr(value, attr, value)
        return str(getattr(getattr(value, "__code__", None), "co_filename", ""))

    def from_tests(value: object) -> bool:
        path = code_file(value)
        if not path.startswith(prefix) or untrusted(path):
            return False
        parts = path[len(prefix) :].split("/")
        return (
            any(p in ("test", "tests", "testing") for p in parts[:-1])
            or parts[-1].startswith("test_")
            or (parts[-1].endswith("_test.py") or parts[-1] == "conftest.py")
        )

    base = fingerprint()
    original = dict(base)

    def check(where: str, accept) -> None:  # type: ignore[no-untyped-def]
        now = fingerprint()
        for key, value in base.items():
            new = now.get(key)
            if new is value:
                continue
            if new is not None and (new is original.get(key) or accept(new)):
                base[key] = new
                continue
            void(f"the test machinery was patched ({where}: {'.'.join(key)})")
            return

    # every other module of the interpreter's own libraries loaded now (contextlib's helpers, traceback, ...):
    # checked when collection has finished and at the end (~60 ms each, too slow for every teardown)
    def module_trusted(mod: object) -> bool:
        path = getattr(mod, "__file__", None)
        return path is None or trusted_name(str(path))

    wide_names = tuple(
        n for n, m in list(sys.modules.items()) if m is not None and n not in watched_modules and module_trusted(m)
    )
    wide_names = tuple(n for n in wide_names if n not in ("__main__", "sys", "warnings"))  # swapped by pytest itself

    def wide_fingerprint() -> dict[tuple[str, ...], object]:
        out: dict[tuple[str, ...], object] = {}
        for mname in wide_names:
            mod = sys.modules.get(mname)
            for key, value in list(vars(mod).items()) if mod is not None else ():
                if not (callable(value) or isinstance(value, type)):
                    continue
                out[(mname, key)] = value
                if isinstance(value, type) and getattr(value, "__module__", "") == mname:
                    for ckey, cvalue in list(vars(value).items()):
                        if callable(cvalue) or isinstance(cvalue, (staticmethod, classmethod, property)):
                            out[(mname, key, ckey)] = cvalue
        return out

    wide_base = wide_fingerprint()
    wide_original = dict(wide_base)

    builtin_function = type(len)

    def trusted_value(value: object) -> bool:  # (a C function or bound C method holds no code of the agent's)
        return type(value) is builtin_function or trusted_name(code_file(value)) or from_tests(value)

    def check_wide(where: str) -> None:
        now = wide_fingerprint()
        for key, value in wide_base.items():
            new = now.get(key)
            if new is value or new is None:  # (a deleted name cannot make a report pass)
                continue
            if new is wide_original.get(key) or trusted_value(new):
                wide_base[key] = new
                continue
            void(f"the interpreter's libraries were patched ({where}: {'.'.join(key)})")
            return

    plugin_box: list = []  # type: ignore[type-arg]

    def check_hooks(where: str) -> None:
        """Every registered hook implementation must be trusted code (see the module docstring)."""
        if not plugin_box:
            return
        for caller in list(vars(plugin_box[0].hook).values()):
            get = getattr(caller, "get_hookimpls", None)
            for impl in get() if get is not None else ():
                path = code_file(getattr(impl, "function", None))
                if not trusted_name(path):
                    name = getattr(impl, "plugin_name", "?")
                    void(f"a pytest plugin of the code under test is registered ({where}: {name} from {path!r})")
                    return

    class Plugin:
        def pytest_sessionstart(self, session) -> None:  # type: ignore[no-untyped-def]
            path_ok = lambda v: (p := code_file(v)).startswith("/") and not p.startswith(prefix)  # noqa: E731
            check("session start", path_ok)  # plugins from site-packages may patch pytest while loading
            plugin_box.append(session.config.pluginmanager)
            check_hooks("session start")

        def pytest_collection_finish(self, session) -> None:  # type: ignore[no-untyped-def]
            check("collection", from_tests)
            check_wide("collection")
            check_hooks("collection")

        def pytest_runtest_logreport(self, report) -> None:  # type: ignore[no-untyped-def]
            send(("R", str(report.nodeid), str(report.when), str(report.outcome), hasattr(report, "wasxfail")))
            if report.when == "teardown":
                check(report.nodeid, from_tests)
                check_hooks(report.nodeid)

        def pytest_collectreport(self, report) -> None:  # type: ignore[no-untyped-def]
            if report.failed:
                send(("C", str(report.nodeid)))

    session_box: list = []  # type: ignore[type-arg]

    class Counts:
        def pytest_sessionfinish(self, session) -> None:  # type: ignore[no-untyped-def]
            session_box.append(session)

    args = list(cfg["args"])
    del cfg
    sys.argv[:] = ["pytest"]
    sys.path.insert(0, repo)
    code = int(pytest.main(args, plugins=[Plugin(), Counts()]))
    state["busy"] = True  # from here on only the runner's code runs (checked just below)
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
    check("session end", from_tests)
    check_wide("session end")
    check_hooks("session end")
    for ident, frame in current_frames().items():
        if ident != threading.get_ident():
            culprit = stack_untrusted(frame)
            if culprit:
                void(f"a thread of the code under test ({culprit}) was still running at the end of the session")
    session = session_box[0] if session_box else None
    counts = (int(session.testscollected), int(session.testsfailed)) if session is not None else (-1, -1)
    state["ended"] = True
    send(("F", code, *counts))
    nonce = recv_exact(chan, 16)
    send(("D", nonce, code))
    sys.stdout.flush()
    sys.stderr.flush()
    real_exit(code)


if __name__ == "__main__":
    _main()
