"""No answer of envkit-serve carries a server path: ALFWorld's info["gamefile"] arrives relative to its root
(``$ALFWORLD_DATA/...`` or ``$ENVKIT_CACHE/...``), ``/envkit/info``'s env kwargs likewise, and no string of any
answer names a private root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def test_the_scrubber_replaces_private_roots_and_only_at_path_boundaries(tmp_path):
    from envkit.serve.paths import PathScrubber, private_roots

    data = tmp_path / "alf data"
    data.mkdir()
    link = tmp_path / "link"
    link.symlink_to(data)
    roots = private_roots({"ALFWORLD_DATA": str(link), "HOME": "/root", "OTHER": "/srv/x"})
    assert roots[str(link)] == roots[str(data)] == "$ALFWORLD_DATA"  # both spellings of a symlinked root
    assert "/root" not in roots and "/srv/x" not in roots  # one component / not a data-like name
    scrub = PathScrubber({str(data): "$ALFWORLD_DATA", str(data / "deeper"): "$DEEP"})
    answer = {"info": {"gamefile": f"{data}/json/train/t1/game.tw-pddl", "list": [f"see {data}", f"{data}x"]},
              f"{data}/k": str(data / "deeper" / "f")}  # fmt: skip
    assert scrub(answer) == {
        "info": {"gamefile": "$ALFWORLD_DATA/json/train/t1/game.tw-pddl", "list": ["see $ALFWORLD_DATA", f"{data}x"]},
        "$ALFWORLD_DATA/k": "$DEEP/f",  # the longest root wins
    }


@pytest.mark.slow
def test_alfworld_answers_over_http_and_websocket_name_no_server_path(serve, wire, alfworld_data):
    from envkit.cache import cache_root

    srv = serve("envkit/ALFWorld-v0", "--oracle", "--env-kwarg", f"data_dir={alfworld_data}")
    # the server's private dirs, found independently of envkit.serve.paths
    roots = [str(alfworld_data), os.path.realpath(alfworld_data), str(cache_root()), os.path.realpath(cache_root()),
             str(Path(__file__).resolve().parents[3])]  # fmt: skip
    roots += [str(Path.home())] if str(Path.home()).count("/") >= 2 else []
    c = wire.Http(srv)
    sid, key = c.session()
    hdr = {"Envkit_Session_Key": key}
    answers = [c.call("POST", f"/envkit/sessions/{sid}/reset", {"seed": 0}, **hdr)]
    gamefile = answers[0][1]["observation"]["info"]["gamefile"]
    assert gamefile.startswith(("$ALFWORLD_DATA/", "$ENVKIT_CACHE/")) and gamefile.endswith("/game.tw-pddl"), gamefile
    first = answers[0][1]["observation"]["info"]["admissible_actions"][0]
    answers.append(c.call("POST", f"/envkit/sessions/{sid}/snapshot_step", {"action": first}, **hdr))
    answers.append(c.call("POST", f"/envkit/sessions/{sid}/oracle", {"max_steps": 3}, **hdr))
    answers.append(c.call("POST", f"/envkit/sessions/{sid}/reset", {"options": {"task_id": "no/such"}}, **hdr))
    answers.append(c.call("POST", "/reset", {"seed": 1}))
    from websockets.sync.client import connect

    with connect(srv.url.replace("http", "ws") + "/ws", open_timeout=30) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 2}}))
        answers.append((200, json.loads(ws.recv(timeout=120))))
    answers.append((200, wire.info(srv)))  # its env kwargs name the data dir: scrubbed like every answer
    assert answers[-1][1]["env_kwargs"]["data_dir"] == "$ALFWORLD_DATA"
    assert [a[0] for a in answers] == [200, 200, 200, 422, 200, 200, 200]
    text = json.dumps(answers)
    assert not [r for r in roots if r in text], "a server path in an answer"
    assert text.count("$ALFWORLD_DATA/") + text.count("$ENVKIT_CACHE/") >= 4
    wire.Http(srv).call("DELETE", f"/envkit/sessions/{sid}", **hdr)
