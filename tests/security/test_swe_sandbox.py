"""SWE-v0's local (bubblewrap) sandbox against a hostile policy: no privilege escape, no reach outside the sandbox,
no harm to concurrent sandboxes, bounded resources; after every attack the env or backend keeps serving."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from envkit.envs.swe.backend import Limits
from envkit.envs.swe.layer_files import chown_tree
from envkit.envs.swe.sandbox import LocalBackend


def sandbox_tree(parent: Path, name: str = "tree") -> str:
    """An empty work tree owned by the sandbox user."""
    t = parent / name
    t.mkdir()
    chown_tree(t, 65534, 65534)
    return str(t)


@pytest.fixture()
def tree(tmp_path, swe_tasks):
    return sandbox_tree(tmp_path)


def run(b: LocalBackend, tree: str, cmd: str, timeout: float = 30, env=None):
    return b.run(tree, cmd, cwd="/repo", env=env or b.base_env(), timeout=timeout)


def serving(b: LocalBackend, tree: str) -> None:
    t0 = time.monotonic()
    r = run(b, tree, "echo alive", timeout=10)
    assert r.output.strip() == "alive" and time.monotonic() - t0 < 5


def caps(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(Cap\w+|NoNewPrivs):\s+(\S+)", text, re.M))


def test_issue_13_setpriv_on_the_agents_path(swe_agent):
    """The reproduction from issue 13: a fake setpriv first on the agent's PATH must never run privileged."""
    swe_agent.env.reset(seed=0)
    swe_agent.create(
        ".bin/setpriv",
        '#!/bin/bash\n{ id; grep Cap /proc/self/status; } > /repo/pwned\nexec /usr/bin/setpriv "$@"\n',
    )
    for helper in ("bwrap", "bash", "env", "sh", "python", "prlimit", "unshare"):
        swe_agent.bash(f"cp .bin/setpriv .bin/{helper}")
    swe_agent.bash("chmod +x .bin/*; export PATH=/repo/.bin:$PATH")
    swe_agent.bash("true")
    pwned = swe_agent.bash("cat /repo/pwned")  # the fake helpers may run, but only as the agent itself
    assert "No such file" in pwned or (
        "uid=0" not in pwned and re.search(r"CapEff:\s+0{16}", pwned) and re.search(r"CapBnd:\s+0{16}", pwned)
    ), pwned
    out = swe_agent.bash("id -u; grep -E 'Cap|NoNewPrivs' /proc/self/status")
    assert out.split()[0] == "65534"
    assert all(v == "0000000000000000" for k, v in caps(out).items() if k.startswith("Cap")) and caps(out)
    assert caps(out)["NoNewPrivs"] == "1"


def test_ld_preload_and_env_never_reach_a_privileged_process(swe_agent, tmp_path):
    """A preload library the agent builds logs every process that loads it: only sandboxed, unprivileged ones."""
    swe_agent.env.reset(seed=0)
    host_log = f"/tmp/envkit-preload-{os.getpid()}.log"
    src = (
        "#include <stdio.h>\n#include <unistd.h>\n#include <string.h>\n"
        "__attribute__((constructor)) static void hit(void) {\n"
        f'  const char *outs[] = {{"/repo/inside.log", "{host_log}"}};\n'
        '  char line[256] = {0}; FILE *s = fopen("/proc/self/status", "r"); char buf[256];\n'
        '  while (s && fgets(buf, sizeof buf, s)) if (!strncmp(buf, "CapEff:", 7)) strncpy(line, buf, 255);\n'
        "  if (s) fclose(s);\n"
        '  for (int i = 0; i < 2; i++) { FILE *f = fopen(outs[i], "a");\n'
        '    if (f) { fprintf(f, "uid=%d %s", (int)geteuid(), line); fclose(f); } }\n}\n'
    )
    swe_agent.create("evil.c", src)
    out = swe_agent.bash("gcc -shared -fPIC -o /repo/evil.so evil.c && echo BUILT", timeout=120)
    if "BUILT" not in out:
        pytest.skip(f"no working C compiler in the sandbox: {out[-300:]}")
    swe_agent.bash("export LD_PRELOAD=/repo/evil.so LD_LIBRARY_PATH=/repo BASH_ENV=/repo/.bashenv; echo set")
    swe_agent.create(".bashenv", "echo bashenv-ran > /repo/bashenv.log\n")
    swe_agent.bash("true")
    swe_agent.step(tool="view", path="evil.c")
    inside = swe_agent.bash("cat /repo/inside.log")
    assert "uid=65534 CapEff:\t0000000000000000" in inside, inside
    assert all(line.startswith("uid=65534 CapEff:\t0000000000000000") for line in inside.strip().splitlines())
    assert not os.path.exists(host_log), open(host_log).read()
    environ = swe_agent.bash("tr '\\0' '\\n' < /proc/1/environ")
    assert "LD_PRELOAD" not in environ and "BASH_ENV" not in environ  # the sandbox's init got a fixed env


def test_no_capabilities_namespaces_or_setuid(tree, swe_tasks):
    b = LocalBackend()
    try:
        out = run(b, tree, "grep -E 'Cap|NoNewPrivs' /proc/self/status").output
        c = caps(out)
        assert {k: c[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == dict.fromkeys(
            ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), "0000000000000000"
        )
        for attempt in ("unshare -Ur true", "unshare -U true", "unshare -m true", "unshare -n true"):
            r = run(b, tree, f"{attempt} && echo ESCAPED-NS")
            assert "ESCAPED-NS" not in r.output, attempt
        r = run(b, tree, "python3 -c \"import os; os.unshare(os.CLONE_NEWUSER); print('ESCAPED-NS')\"")
        assert "ESCAPED-NS" not in r.output
        r = run(b, tree, "/usr/bin/mount -t tmpfs none /tmp && echo MOUNTED; /usr/bin/su -c id root; id -u")
        assert "MOUNTED" not in r.output and r.output.split()[-1] == "65534"
        serving(b, tree)
    finally:
        b.close()


def test_no_host_devices_secrets_or_environ(tree, swe_tasks, monkeypatch):
    monkeypatch.setenv("ENVKIT_HOST_CANARY", "h0st-c4n4ry")
    b = LocalBackend()
    try:
        r = run(
            b,
            tree,
            "ls /dev; cat /etc/shadow /etc/gshadow 2>&1 | head -c 200; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'",
        )
        devs = r.output
        assert not re.search(r"\b(sd[a-z]|vd[a-z]|nvme\d|xvd[a-z]|loop\d|mem|kmsg|dm-\d)\b", devs), devs
        assert "root:" not in r.output and "h0st-c4n4ry" not in r.output
        r = run(b, tree, "ls /proc | grep -cE '^[0-9]+$'; cat /proc/*/cmdline | tr '\\0' ' '")
        assert int(r.output.split()[0]) < 10  # only the sandbox's own processes
        assert "bwrap --args" in r.output  # pid 1: its options (host paths) came through a pipe (issue 33)
        for host_path in (tree, *b._prefix, os.path.dirname(tree)):
            assert host_path not in r.output, (host_path, r.output[:2000])
        serving(b, tree)
    finally:
        b.close()


def test_writes_outside_the_overlay_fail(tree, swe_tasks):
    import sys

    b = LocalBackend()
    prefix = os.path.realpath(sys.prefix)
    targets = ["/usr/evil", "/etc/evil", f"{prefix}/evil", "/proc/sys/kernel/hostname", "/sys/evil", "/evil"]
    try:
        r = run(b, tree, "; ".join(f"echo x > {t} 2>/dev/null && echo WROTE {t}" for t in targets))
        assert "WROTE" not in r.output, r.output
        for t in targets[:3]:
            assert not os.path.exists(t)
        serving(b, tree)
    finally:
        b.close()


@pytest.mark.slow
def test_kill_minus_one_cannot_reach_another_sandbox_or_the_host(tmp_path, swe_tasks):
    trees = [sandbox_tree(tmp_path, name) for name in ("a", "b")]
    host = subprocess.Popen(["sleep", "30"], user=65534, group=65534, extra_groups=[])  # a host process, same uid
    a, b = LocalBackend(), LocalBackend()
    results: dict[str, str] = {}
    try:
        th = threading.Thread(target=lambda: results.update(a=run(a, trees[0], "sleep 6; echo A-SURVIVED").output))
        th.start()
        time.sleep(2)
        r = run(b, trees[1], "kill -9 -1; pkill -9 -u 65534; kill -9 $(pgrep sleep) 2>/dev/null; echo B-DONE")
        assert "B-DONE" in r.output or r.exit_code is not None
        th.join()
        assert "A-SURVIVED" in results["a"], results
        assert host.poll() is None, "the sandbox killed a host process of the same uid"
        serving(a, trees[0])
        serving(b, trees[1])
    finally:
        host.kill()
        host.wait()
        a.close()
        b.close()


@pytest.mark.slow
def test_process_flood_does_not_starve_another_sandbox(tmp_path, swe_tasks):
    trees = [sandbox_tree(tmp_path, name) for name in ("a", "b")]
    lim = Limits(nproc=64, timeout_s=30)
    a, b = LocalBackend(lim), LocalBackend(lim)
    results: dict[str, str] = {}
    try:
        flood = (
            "python3 - <<'EOF'\nimport os, time\nn = 0\nwhile n < 500:\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(8)\n        os._exit(0)\n"
            "    n += 1\nprint('A-FLOODED', n, flush=True)\ntime.sleep(6)\nEOF"
        )
        th = threading.Thread(target=lambda: results.update(a=run(a, trees[0], flood, timeout=15).output))
        th.start()
        time.sleep(3)
        r = run(b, trees[1], "for i in $(seq 40); do sleep 1 & done; wait; echo B-OK", timeout=20)
        th.join()
        assert "B-OK" in r.output and "fork" not in r.output, r.output
        m = re.search(r"A-FLOODED (\d+)", results["a"])
        assert m and 40 < int(m.group(1)) < 64, results["a"]  # A hit its own limit, not B's
        serving(a, trees[0])
    finally:
        a.close()
        b.close()


@pytest.mark.slow
def test_fork_bomb_is_contained_and_leaves_nothing(tree, swe_tasks):
    b = LocalBackend(Limits(nproc=128, timeout_s=10))
    if not b.cgroups or "pids" not in b.cgroups.dirs:
        pytest.skip(f"no pids cgroup to count the sandbox's processes: {b.isolation['cgroup_missing']}")
    procs = os.path.join(b.cgroups.dirs["pids"], "cgroup.procs")
    try:
        t0 = time.monotonic()
        r = run(b, tree, "bomb() { bomb | bomb & }; bomb; sleep 20", timeout=6)
        assert r.timed_out and time.monotonic() - t0 < 15
        serving(b, tree)
        assert open(procs).read().split() == []  # nothing of the bomb is left
    finally:
        b.close()


def test_tmp_and_repo_size_caps(swe_tasks):
    from envkit.envs.swe.env import SWEEnv

    env = SWEEnv(tasks=swe_tasks, limits=Limits(tmp_mb=32, repo_mb=48, file_mb=512))
    try:
        env.reset(seed=0)
        obs = env.step(json.dumps({"tool": "bash", "command": "head -c 100M /dev/zero > /tmp/x; ls -l /tmp/x"}))[0]
        assert "No space left" in obs
        s = env.snapshot()
        cmd = "head -c 100M /dev/zero > /repo/big; for i in $(seq 30); do head -c 2M /dev/zero > /repo/f$i; done; du -sm /repo/big"
        obs = env.step(json.dumps({"tool": "bash", "command": cmd, "timeout": 60}))[0]
        assert "No space left" in obs
        assert int(re.search(r"^(\d+)\s+/repo/big", obs, re.M).group(1)) <= 48
        obs = env.step(json.dumps({"tool": "create", "path": "more.txt", "file_text": "x" * 60_000}))
        assert obs[4]["invalid"]
        env.restore(s)  # the cap starts over after a restore
        obs = env.step(json.dumps({"tool": "bash", "command": "head -c 20M /dev/zero > /repo/ok && echo WROTE"}))[0]
        assert "WROTE" in obs
    finally:
        env.close()


def test_huge_output_is_capped_in_time_and_memory(tree, swe_tasks):
    import resource

    b = LocalBackend(Limits(output_chars=4000, output_hard_bytes=8 << 20))
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.monotonic()
        r = run(b, tree, "yes 'flood flood flood'", timeout=30)
        assert time.monotonic() - t0 < 15 and len(r.output) < 6000
        assert "exceeded" in r.output
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024
        serving(b, tree)
    finally:
        b.close()


def test_state_channel_flood_is_ignored(tree, swe_tasks):
    b = LocalBackend()
    try:
        r = run(
            b, tree, "export KEEP=1; for fd in /proc/self/fd/*; do head -c 3M /dev/zero >> $fd; done 2>/dev/null; true"
        )
        r2 = b.run(tree, "echo ${KEEP:-unset}", cwd=r.cwd, env=dict(r.env), timeout=10)
        assert r2.output.strip() in ("1", "unset")
        serving(b, tree)
    finally:
        b.close()


def test_memory_cgroup_bounds_the_sandbox_as_a_whole(tree, swe_tasks):
    b = LocalBackend(Limits(memory_mb=200, tmp_mb=32, repo_mb=32))
    try:
        if "memory" not in b.isolation["cgroup"]:
            pytest.skip(f"no memory cgroup: {b.isolation['cgroup_missing']}")
        # each holds its 150 MiB for a second, so the four overlap whatever the scheduler does (without the sleep
        # they can run one after another when the sandbox gets little CPU, and each fits alone)
        alloc = "python3 -c \"import time; b = bytearray(150 << 20); time.sleep(1); print('ALLOC-OK')\""
        r = run(b, tree, " & ".join([alloc] * 4) + "; wait", timeout=60)
        assert len(re.findall(r"^ALLOC-OK$", r.output, re.M)) < 4, r.output
        serving(b, tree)
    finally:
        b.close()


@pytest.mark.slow
def test_agent_path_does_not_reach_grading(swe_agent):
    """A fake python/git/bash first on the agent's exported PATH: grading uses its own environment."""
    swe_agent.env.reset(seed=0, options={"index": 2})
    for name in ("python", "python3", "pytest", "git", "bash"):
        swe_agent.create(f".evil/{name}", f"#!/bin/sh\necho {name} > /repo/evil-ran\nexit 0\n")
    swe_agent.bash("chmod +x .evil/*")
    swe_agent.apply_gold()
    swe_agent.bash("export PATH=/repo/.evil:$PATH PYTHONPATH=/repo/.evil PYTEST_ADDOPTS='-p no:python'")
    r, info = swe_agent.submit()
    assert r == 1.0, swe_agent.env.last_grade.output[-2000:]
    assert not os.path.exists(os.path.join(swe_agent.env.root, "evil-ran"))


def test_host_path_and_preload_do_not_choose_the_helpers(tree, tmp_path, monkeypatch):
    """Even the env process's own PATH/LD_PRELOAD cannot substitute bwrap or bash: absolute paths, fixed env."""
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "helper-ran"
    for name in ("bwrap", "bash", "setpriv", "env"):
        (evil / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\nexit 0\n")
        (evil / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{evil}:{os.environ['PATH']}")
    b = LocalBackend()
    try:
        argv = b._argv(tree, 5, 6)
        assert argv[0].startswith("/") and not argv[0].startswith(str(evil))
        for flag in ("--unshare-user", "--disable-userns", "--unshare-pid", "--new-session", "--clearenv"):
            assert flag in argv
        assert argv[argv.index("--cap-drop") + 1] == "ALL"
        assert "/bin/bash" in argv and "--cap-add" not in argv
        monkeypatch.setenv("LD_PRELOAD", str(evil / "nope.so"))
        r = run(b, tree, "echo fine; tr '\\0' '\\n' < /proc/1/environ")
        assert r.output.splitlines()[0] == "fine" and "LD_PRELOAD" not in r.output
        assert not marker.exists()
    finally:
        b.close()
