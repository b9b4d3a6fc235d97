"""envkit-serve round three: limits that hold under churn, shutdown that cleans up, a fair share for token holders.

- A DELETE mid-step does not free the session's slot while its env still runs: ``--max-sessions`` counts it
  and ``/envkit/info`` shows it (``sessions_closing``) until the env has stopped.
- SIGTERM closes every session's env (the cleanup that releases sandboxes, mounts, cgroups) before exit.
- With a token, unauthenticated sockets have their own small share: 40 idle ones cannot make a token holder's
  request fail.
- One deadline per request that nothing resets: a request answered before its body was read (``/health``)
  and then fed one body byte at a time is closed at ``header_timeout + body_timeout``.
- The header limit holds for a head that arrives in one write.
Cost: about 25 s (five small servers of the Toy env).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

TOY = "envkit/Toy-v0"


def test_a_slot_is_freed_only_when_its_env_has_stopped(serve, wire):
    srv = serve(TOY, "--max-sessions", "2", "--env-kwarg", "step_delay=4")
    c = wire.Http(srv)
    sid, key = c.session()
    assert c.call("POST", f"/envkit/sessions/{sid}/reset", {"seed": 0}, Envkit_Session_Key=key)[0] == 200
    results: dict[str, object] = {}

    def call(name: str, method: str, path: str, body: object = None) -> None:
        h = wire.Http(srv)
        results[name] = h.call(method, path, body, Envkit_Session_Key=key)
        results[name + "_at"] = time.monotonic()
        h.close()

    stepping = threading.Thread(target=call, args=("step", "POST", f"/envkit/sessions/{sid}/step", {"action": "right"}))
    stepping.start()
    time.sleep(0.8)  # the step runs (4 s of env work)
    deleting = threading.Thread(target=call, args=("delete", "DELETE", f"/envkit/sessions/{sid}"))
    deleting.start()
    info = wire.settled_info(srv, lambda i: i["sessions_closing"] == 1, timeout=2)
    assert (info["sessions"], info["sessions_closing"]) == (1, 1), info  # closed, but its env still runs
    other = wire.Http(srv)
    assert other.call("POST", "/envkit/sessions", {})[0] == 200  # the one free slot
    status, out = other.call("POST", "/envkit/sessions", {})
    assert status == 503 and "maximum of 2 sessions" in out["error"]["message"], (status, out)  # not a third
    stepping.join(30)
    deleting.join(30)
    assert results["step"][0] == 200 and results["delete"][0] == 200, results
    info = wire.settled_info(srv, lambda i: i["sessions_closing"] == 0)
    assert (info["sessions"], info["sessions_closing"]) == (1, 0), info
    assert other.call("POST", "/envkit/sessions", {})[0] == 200  # the env stopped: its slot is free again
    other.close()


def test_sigterm_closes_every_session_before_exit(wire, tmp_path):
    import pytest

    pytest.importorskip("openenv.core.env_server")
    from tests.serve.conftest import REPO, Server, free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "envkit.serve.cli", TOY, "--port", str(port), "--shutdown-timeout", "20"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        srv = Server(TOY, port=port)
        deadline = time.monotonic() + 120
        while True:
            try:
                wire.raw_socket(srv, 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.1)
        c = wire.Http(srv)
        for _ in range(3):
            sid, key = c.session()
            assert c.call("POST", f"/envkit/sessions/{sid}/reset", {"seed": 0}, Envkit_Session_Key=key)[0] == 200
        assert wire.info(srv)["sessions"] == 3
        c.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) in (0, -signal.SIGTERM), log.read_text()  # uvicorn re-raises the signal it handled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "every session's env closed" in log.read_text(), log.read_text()


def test_unauthenticated_sockets_cannot_starve_a_token_holder(serve, wire):
    srv = serve(TOY, "--token", "T0ken", "--max-connections", "8", "--max-unauthenticated", "4",
                "--header-timeout", "30")  # fmt: skip
    idle = [wire.raw_socket(srv) for _ in range(40)]  # connect and say nothing (re-opened as they go)
    try:
        time.sleep(0.3)
        c = wire.Http(srv)
        for _ in range(5):
            status, out = c.call("GET", "/envkit/info", Authorization="Bearer T0ken")
            assert status == 200, (status, out)
        c.close()
        fresh = wire.Http(srv)  # a new connection of a token holder, after the flood
        assert fresh.call("POST", "/envkit/sessions", {}, Authorization="Bearer T0ken")[0] == 200
        fresh.close()
    finally:
        for s in idle:
            s.close()


def test_an_early_answer_does_not_keep_a_trickling_body_alive(serve, wire):
    srv = serve(TOY, "--header-timeout", "1", "--body-timeout", "2", "--keep-alive", "30")
    with wire.raw_socket(srv) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")  # answered at once
        t0 = time.monotonic()
        s.settimeout(0.5)
        closed = False
        while time.monotonic() - t0 < 12:
            try:
                s.sendall(b"x")  # one body byte at a time: each used to reset the keep-alive timer
                if s.recv(65536) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed and time.monotonic() - t0 < 6, "the connection outlived its request deadline"
    wire.still_serves(srv)


def test_the_header_limit_holds_for_a_head_sent_in_one_write(serve, wire):
    srv = serve(TOY)
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(80))
    with wire.raw_socket(srv) as s:
        s.sendall(head + b"\r\n")  # ~80 KiB, one write, over the 64 KiB limit
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
    wire.still_serves(srv)


def test_one_session_cannot_take_the_snapshot_bytes_another_needs(serve, wire):
    # 2 MiB for 2 sessions: 1 MiB each. Each snapshot carries its episode's replay record (3 x 60 KB actions).
    srv = serve(TOY, "--max-snapshot-mb", "2", "--max-sessions", "2", "--env-kwarg", "max_steps=1000")
    c = wire.Http(srv)
    (a, ka), (b, kb) = c.session(), c.session()
    for sid, key in ((a, ka), (b, kb)):
        assert c.call("POST", f"/envkit/sessions/{sid}/reset", {"seed": 0}, Envkit_Session_Key=key)[0] == 200
        for _ in range(3):
            assert (
                c.call("POST", f"/envkit/sessions/{sid}/step", {"action": "x" * 60_000}, Envkit_Session_Key=key)[0]
                == 200
            )
    for _ in range(50):  # the greedy session snapshots until refused
        status, out = c.call("POST", f"/envkit/sessions/{a}/snapshot", {}, Envkit_Session_Key=ka)
        if status != 200:
            break
    assert status == 409 and "--max-snapshot-mb-per-session" in out["error"]["message"], (status, out)
    info = wire.info(srv)
    assert info["max_snapshot_bytes_per_session"] == 1 << 20 and info["snapshot_bytes"] <= 1 << 20
    # the other session's honest episode still snapshots (its share was never available to the first)
    for _ in range(2):
        status, out = c.call("POST", f"/envkit/sessions/{b}/snapshot", {}, Envkit_Session_Key=kb)
        assert status == 200, out
    assert c.call("DELETE", f"/envkit/sessions/{a}", Envkit_Session_Key=ka)[0] == 200
    wire.still_serves(srv)
