"""Request and connection limits hold against a hostile client, and the server keeps serving: bodies are counted
as they arrive (chunked too), WebSocket messages are capped at the same size, never-finished requests and
idle connections are dropped on deadlines, open connections are capped, and malformed input gets a 4xx with
the reason (never a 500)."""

from __future__ import annotations

import json
import time

import pytest

TOY = "envkit/Toy-v0"
MIB = 1 << 20


def _chunked(sock, path: str, chunks, chunk_size: int) -> bytes:
    """Send a chunked POST of `chunks` chunks of `chunk_size` bytes; the server's answer (what it sent first)."""
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n".encode())  # fmt: skip
    payload = b"[" * chunk_size
    try:
        for _ in range(chunks):
            sock.sendall(f"{chunk_size:x}\r\n".encode() + payload + b"\r\n")
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):  # the server answered and closed while we sent
        pass
    return _read_all(sock)


def _read_all(sock) -> bytes:
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return out


def test_a_chunked_body_is_counted_as_it_arrives(serve, wire):
    srv = serve(TOY)
    c = wire.Http(srv)
    sid, key = c.session()
    with wire.raw_socket(srv, timeout=30) as s:
        answer = _chunked(s, f"/envkit/sessions/{sid}/reset", chunks=40, chunk_size=MIB // 4)  # 10 MiB, no length
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"exceeds the server's limit of 8388608 bytes" in answer
    with wire.raw_socket(srv) as s:  # a small chunked body is fine
        s.sendall(b"POST /envkit/sessions/" + sid.encode() + b"/reset HTTP/1.1\r\nHost: x\r\nEnvkit-Session-Key: "
                  + key.encode() + b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                  b"a\r\n{\"seed\": 1\r\n1\r\n}\r\n0\r\n\r\n")  # fmt: skip
        assert _read_all(s).startswith(b"HTTP/1.1 200")
    with wire.raw_socket(srv) as s:  # with a Content-Length over the limit: refused before the body is sent
        s.sendall(f"POST /envkit/sessions/{sid}/step HTTP/1.1\r\nHost: x\r\nContent-Length: {9 * MIB}\r\n\r\n".encode())
        assert _read_all(s).startswith(b"HTTP/1.1 413")
    wire.still_serves(srv)


def test_a_websocket_message_over_the_limit_closes_the_connection_before_it_is_parsed(serve, wire):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    srv = serve(TOY)
    url = srv.url.replace("http", "ws") + "/ws"
    with connect(url, open_timeout=10, max_size=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"action": "x" * (9 * MIB)}}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # message too big
    assert wire.settled_info(srv, lambda i: i["sessions"] == 0)["sessions"] == 0  # its session went with it
    with connect(url, open_timeout=10) as ws:  # just under the limit is parsed (and refused by the env's length)
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "step", "data": {"action": "x" * (7 * MIB)}}))
        assert json.loads(ws.recv(timeout=30))["data"]["error_type"] == "InvalidActionError"
    wire.still_serves(srv)


def _closed_by_server(sock, wait: float) -> tuple[bool, bytes]:
    """(whether the server closed `sock` within `wait` s, what it sent before)."""
    sock.settimeout(wait)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
        return True, out
    except ConnectionResetError:
        return True, out
    except TimeoutError:
        return False, out


def test_never_finished_requests_are_dropped_and_connections_are_capped(serve, wire):
    srv = serve(TOY, "--header-timeout", "1", "--body-timeout", "1", "--max-connections", "16")
    half_headers = [wire.raw_socket(srv) for _ in range(8)]
    for s in half_headers:
        s.sendall(b"POST /envkit/sessions HTTP/1.1\r\nHost: x\r\n")  # never finished
    silent = [wire.raw_socket(srv) for _ in range(4)]  # connect, send nothing (12 held, under the cap of 16)
    with wire.raw_socket(srv) as s:
        s.sendall(b'POST /envkit/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"a"')  # body stalls
        t0 = time.monotonic()
        closed, answer = _closed_by_server(s, 10)
        assert closed and answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1.0 s" in answer, answer
        assert time.monotonic() - t0 < 5
    t0 = time.monotonic()
    for s in half_headers + silent:  # every one closed by the server on its header deadline, none held
        closed, answer = _closed_by_server(s, max(0.1, 4 - (time.monotonic() - t0)))
        assert closed and (answer == b"" or answer.startswith(b"HTTP/1.1 408")), answer
        s.close()
    wire.still_serves(srv)
    # a flood beyond twice the cap is closed at once (503); the rest go on their header deadline (408)
    flood = [wire.raw_socket(srv) for _ in range(48)]
    answers = []
    for s in flood:
        closed, answer = _closed_by_server(s, 5)
        assert closed, "a flood connection was held past its header deadline"
        answers.append(answer[:12])
        s.close()
    assert answers.count(b"HTTP/1.1 503") >= 48 - 2 * 16 and set(answers) <= {b"HTTP/1.1 503", b"HTTP/1.1 408"}
    wire.still_serves(srv)


DEEP = b"[" * 5_000 + b"]" * 5_000  # past CPython's parser recursion, under the value limit
#: 8 MiB of empty objects: the bytes pass, the values do not (counted before parsing).
WIDE = b'{"options": {"a": [' + b"{}," * ((8 << 20) // 3 - 20) + b"{}]}}"
#: (route: "session/<op>" or a path, raw body, expected status, a fragment of the reason)
MALFORMED = [
    ("session/reset", b'{"options": {"a": ' + DEEP + b"}}", 422, "nested too deeply"),
    ("session/reset", b'{"options": {"a": ' + b"[" * 200 + b"]" * 200 + b"}}", 422, "nested deeper than 32"),
    ("session/reset", b'{"seed": -1}', 422, "seed: Input should be greater than or equal to 0"),
    ("session/reset", b'{"seed": 18446744073709551616}', 422, "seed: Input should be less than"),
    ("session/reset", b'{"seed": 1.5}', 422, "seed"),
    ("session/reset", b'{"seed": NaN}', 422, "seed"),
    ("session/reset", b'{"seed": ' + b"9" * 5000 + b"}", 422, "digits"),
    ("session/reset", b'{"options": []}', 422, "options"),
    ("session/reset", b'{"episode_id": "' + b"e" * 300 + b'"}', 422, "episode_id"),
    ("session/reset", b'{"sneaky": 1}', 422, "sneaky: Extra inputs are not permitted"),
    ("session/reset", b"{", 422, "not valid JSON"),
    ("session/reset", b'{"seed": "\xff"}', 422, "not valid UTF-8"),
    ("session/reset", b"[1, 2]", 422, "must be a JSON object"),
    ("session/reset", b'"text"', 422, "must be a JSON object"),
    ("session/step", b'{"action": {"a": 1}}', 422, "action: Input should be a valid string"),
    ("session/step", b'{"action": "right\\ud800"}', 422, "not valid Unicode"),
    ("session/restore", b'{"handle": 5}', 422, "handle"),
    ("session/restore", b'{"handle": "nope"}', 409, "unknown snapshot handle"),
    ("session/oracle", b'{"max_steps": -1}', 422, "max_steps"),
    ("session/teleport", b"{}", 422, "unknown operation"),
    ("/reset", b'{"seed": -1}', 422, "seed"),
    ("/reset", DEEP, 422, "nested too deeply"),
    ("/reset", WIDE, 422, "over the server's limit of 10000"),
    ("session/reset", WIDE, 422, "over the server's limit of 10000"),
    ("/step", b'{"action": ' + DEEP + b"}", 422, "nested too deeply"),
    ("/step", b'{"action": {"text": "right"}}', 409, "needs a reset first"),
    ("/envkit/sessions/" + "0" * 32 + "/step", b'{"action": "right"}', 404, "no session"),
]


def test_malformed_inputs_get_a_4xx_with_the_reason_and_the_session_survives(serve, wire):
    srv = serve(TOY, "--oracle")
    c = wire.Http(srv)
    sid, key = c.session()
    assert c.call("POST", f"/envkit/sessions/{sid}/reset", {"seed": 0}, Envkit_Session_Key=key)[0] == 200
    wrong = []
    for route, raw, status, reason in MALFORMED:
        path = f"/envkit/sessions/{sid}/{route[8:]}" if route.startswith("session/") else route
        got, out = c.call("POST", path, raw=raw, Envkit_Session_Key=key)
        msg = out["error"]["message"] if isinstance(out, dict) and "error" in out else str(out)
        if got != status or reason not in msg:
            wrong.append((route, raw[:40], got, msg[:200]))
    assert not wrong, wrong
    # the same over the WebSocket: an error message each, the connection and its session stay
    from websockets.sync.client import connect

    with connect(srv.url.replace("http", "ws") + "/ws", open_timeout=10) as ws:
        for text, reason in [(b"[" * 5000, "nested too deeply"), ('{"type": "reset", "data": {"seed": -1}}', "seed"),
                             ("[]", "must be a JSON object"), ('{"type": "reset", "data": [1]}', "a message must be"),
                             (b"\xff\xfe", "UTF-8"), ('{"type": ["x"]}', "unknown operation")]:  # fmt: skip
            ws.send(text)
            answer = json.loads(ws.recv(timeout=10))
            assert answer["type"] == "error" and reason in answer["data"]["message"], (text[:30], answer)
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
    status, out = c.call("POST", f"/envkit/sessions/{sid}/step", {"action": "right"}, Envkit_Session_Key=key)
    assert status == 200, out
    wire.still_serves(srv)


def test_a_quiet_websocket_is_closed_with_its_session_after_the_idle_timeout(serve, wire):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    srv = serve(TOY, "--idle-timeout", "1")
    with connect(srv.url.replace("http", "ws") + "/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        ws.recv(timeout=10)
        assert wire.info(srv)["sessions_by_kind"]["ws"] == 1
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)  # the client says nothing: the server closes
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    assert wire.settled_info(srv, lambda i: i["sessions"] == 0)["sessions"] == 0
    wire.still_serves(srv)
