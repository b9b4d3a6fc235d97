"""SWE-v0 grading against code that runs inside the pytest process (issue 23, section 1): one test per layer.

Each test appends a payload to a gradable source file (``more_itertools/__init__.py``, imported by the tests),
submits, and asserts reward 0 (and, where a layer detects it, the reason in ``info["grade_void"]``); then it
restores the snapshot from before the payload, applies the gold patch and asserts reward 1: the env keeps
serving and honest work still pays. Runtime layers are tested with the static screen off (``screen_diff``), so
each layer is shown to hold on its own.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.slow

TASK = 2  # exactly_n: 3 required tests, 2 fail with the bug

ISSUE_ARGV = """import sys as _s, os as _o, json as _j
if _s.argv and _s.argv[0].endswith("grade_runner.py"):
    _fd = _o.open(_s.argv[1], _o.O_WRONLY | _o.O_TRUNC)
    _o.write(_fd, _j.dumps({"exit": 0, "status": {a: "passed" for a in _s.argv[3:] if "::" in a},
                            "collect_errors": [], "tampered": []}).encode()); _o.close(_fd); _o._exit(0)
"""

ISSUE_MAIN = """import sys as _s
_m = _s.modules.get("__main__")
for _n, _v in list(vars(_m).items()) if _m is not None else []:
    if isinstance(_v, type) and hasattr(_v, "pytest_runtest_logreport"):
        _orig = _v.pytest_runtest_logreport
        def _lr(self, report, _orig=_orig):
            report.outcome = "passed"
            return _orig(self, report)
        _v.pytest_runtest_logreport = _lr
        _v._set = lambda self, nodeid, outcome: self.status.__setitem__(nodeid, "passed")
"""

ISSUE_JSON = """import json as _j, marshal as _ma
_od = _j.dumps
def _dumps(o, *a, **k):
    if isinstance(o, dict) and isinstance(o.get("status"), dict):
        o = {**o, "status": {t: "passed" for t in o["status"]}, "void": [], "exit": 0}
    return _od(o, *a, **k)
_j.dumps = _dumps
_om = _ma.dumps
_ma.dumps = lambda o, *a: _om(o[:3] + ("passed",) + o[4:] if isinstance(o, tuple) and o[:1] == ("R",) else o, *a)
"""

# the whole protocol, forged through the channel found by scanning descriptors (no audited primitive used)
PROTOCOL = """import os as _o, stat as _st, marshal as _ma
def _chan():
    for fd in range(3, 1024):
        try:
            if _st.S_ISSOCK(_o.fstat(fd).st_mode):
                return fd
        except OSError:
            pass
_fd = _chan()
if _fd is not None:
    _keep = _o.dup(_fd)
    _null = _o.open("/dev/null", _o.O_RDWR)
    _o.dup2(_null, _fd)  # the genuine reports now go nowhere
    def _send(m):
        d = _ma.dumps(m)
        _o.write(_keep, len(d).to_bytes(4, "big") + d)
    _ids = ["tests/test_more.py::ExactlyNTests::" + n for n in ("test_empty", "test_false", "test_true")]
    for _i in _ids:
        for _w in ("setup", "call", "teardown"):
            _send(("R", _i, _w, "passed", False))
    _send(("F", 0, 3, 0))
    _nonce = _o.read(_keep, 16) if READ_NONCE else b"0" * 16
    _send(("D", _nonce, 0))
"""

LEAK = """import os as _o, sys as _s, subprocess as _sp
_seen = [repr(_s.argv), repr(dict(_o.environ))]
for _p in _o.listdir("/proc"):
    if _p.isdigit() and _p != str(_o.getpid()):
        for _f in ("cmdline", "environ"):
            _r = _sp.run(["cat", f"/proc/{_p}/{_f}"], capture_output=True)
            _seen.append(_r.stdout.decode("latin1") + _r.stderr.decode("latin1"))
for _d in ("/envkit-grader", "/envkit-report", "/tmp", "/"):
    try:
        _seen.append(repr(_o.listdir(_d)))
    except OSError as _e:
        _seen.append(repr(_e))
raise RuntimeError("LEAKSTART" + "|".join(_seen).replace("\\n", " ").replace("\\0", " ") + "LEAKEND")  # shown
"""

AUDITED = {
    "gc.get_objects": "import gc as _g\n_g.get_objects()\n",
    "gc.get_referrers": "import gc as _g\n_g.get_referrers(_g)\n",
    "sys._getframe": "import sys as _s\n_s._getframe(0)\n",
    "inspect.stack": "import inspect as _i\n_i.stack()\n",
    "logging.currentframe": "import logging as _l\n_l.currentframe()\n",
    "tb_frame": "try:\n    raise ValueError\nexcept ValueError as _e:\n    _e.__traceback__.tb_frame\n",
    "ctypes": "import ctypes as _c\n_c.CDLL(None)\n",
    "/proc/self/fd": "import os as _o\n_o.listdir('/proc/self/fd')\n",
    "/proc/self/mem": "try:\n    open('/proc/self/mem', 'rb').close()\nexcept OSError:\n    pass\n",
    "/proc/self/mem through a symlink": "import os as _o, pathlib as _pl\n_o.symlink('/proc/self/mem', '/tmp/_m')\n"
    "try:\n    _pl.Path('/tmp/_m').open('rb').close()\nexcept OSError:\n    pass\n",
    "sys.settrace": "import sys as _s\n_s.settrace(None)\n",
    "atexit": "import atexit as _a\n_a.register(print)\n",
    "signal handler (gets the running frame)": "import signal as _sg\n_sg.signal(_sg.SIGUSR1, lambda n, f: None)\n",
    "os._exit": "import os as _o\nif not hasattr(_o, '_envkit_never'):\n    _o._exit(0)\n",
    "compile under a trusted name": "import logging as _l\n"
    "exec(compile('import sys\\nsys._getframe(0)', _l.__file__, 'exec'))\n",
    "code.replace": "(lambda: 0).__code__.replace(co_filename='/usr/lib/python3/x.py')\n",
    "a thread left running": "import threading as _t, time as _tm\n"
    "_t.Thread(target=lambda: _tm.sleep(60), daemon=True).start()\n",
}

HONEST = """import logging as _logging, collections as _c, dataclasses as _d, typing as _ty, enum as _en, tempfile as _tf
_logging.getLogger(__name__).debug("honest code may log")
_P = _c.namedtuple("_P", "x y")
_T = _ty.TypeVar("_T")
_E = _en.Enum("_E", "A B")
@_d.dataclass(frozen=True)
class _D:
    x: int = 1
_D(); _P(1, 2)
with _tf.TemporaryDirectory() as _tmp:
    pass
try:
    raise KeyError("k")
except KeyError:
    import traceback as _tb
    _tb.format_exc()
"""


@pytest.fixture()
def agent(swe_agent):
    swe_agent.env.reset(seed=0, options={"index": TASK})
    return swe_agent


def graded(agent, payload: str, *, gold: bool = False, screen: bool = False) -> tuple[float, dict]:
    """Submit with `payload` appended to the package (on the bug, or on the gold fix); then check that an
    honest submission from the same state still earns 1."""
    env = agent.env
    snap = env.snapshot()
    env.screen_diff = screen
    try:
        if gold:
            agent.apply_gold()
        agent.bash("cat >> more_itertools/__init__.py <<'EOF'\n" + payload + "\nEOF")
        r, info = agent.submit()
        info["output"] = env.last_grade.output  # the graded run's output (the honest run below replaces last_grade)
    finally:
        env.screen_diff = True
    env.restore(snap)
    agent.apply_gold()
    r2, info2 = agent.submit()
    assert r2 == 1.0 and info2["success"] and info2["grade_void"] == [], info2
    return r, info


def test_issue_argv_forgery_finds_nothing(agent):
    r, info = graded(agent, ISSUE_ARGV)
    assert r == 0.0 and info["tests_failed"]
    assert "2 failed" in info["output"]  # the payload found nothing to act on: the bug is graded


def test_issue_argv_forgery_is_screened(agent):
    r, info = graded(agent, ISSUE_ARGV, screen=True)
    assert r == 0.0
    reasons = " ".join(info["grade_void"])
    assert "screen: more_itertools/__init__.py: sys.argv" in reasons and "os._exit" in reasons, reasons


def test_issue_main_verdicts_patch(agent):
    r, info = graded(agent, ISSUE_MAIN)
    assert r == 0.0 and sorted(info["tests_failed"]) == [
        "tests/test_more.py::ExactlyNTests::test_false",
        "tests/test_more.py::ExactlyNTests::test_true",
    ]


def test_issue_json_dumps_patch(agent):
    r, info = graded(agent, ISSUE_JSON)
    assert r == 0.0
    assert any("marshal" in v for v in info["grade_void"]), info["grade_void"]  # the fingerprint saw marshal.dumps


def test_nothing_about_the_run_is_discoverable(agent):
    r, info = graded(agent, LEAK)
    out = info["output"]
    found = re.search(r"LEAKSTART\[.*?LEAKEND", out)
    assert found, out[-3000:]
    leak = found.group(0)
    assert r == 0.0
    for secret in ("ExactlyNTests", "test_false", "ENVKIT_GRADE", '"key"', "report"):
        assert secret not in leak, (secret, leak[:3000])
    assert "Permission denied" in leak  # the supervisor's /proc/<pid>/environ is closed (non-dumpable)


@pytest.mark.parametrize("read_nonce", [False, True], ids=["guessed-nonce", "stolen-nonce"])
def test_protocol_forgery_through_the_channel(agent, read_nonce):
    """The channel found by fstat cannot be duplicated or silenced (the seccomp guard, issue 33): the payload fails."""
    r, info = graded(agent, f"READ_NONCE = {read_nonce}\n" + PROTOCOL)
    assert r == 0.0 and info["tests_failed"]
    assert "PermissionError" in info["output"] or info["grade_void"], info["output"][-2000:]


@pytest.mark.parametrize("name", sorted(AUDITED))
def test_audited_primitive_voids_even_a_correct_fix(agent, name):
    r, info = graded(agent, AUDITED[name], gold=True)
    assert r == 0.0 and info["grade_void"], info


def test_honest_code_is_not_voided(agent):
    """Logging, namedtuple, TypeVar, Enum, dataclass, TemporaryDirectory, traceback: stdlib frame use, no void."""
    r, info = graded(agent, HONEST, gold=True, screen=True)
    assert r == 1.0 and info["grade_void"] == [], info
