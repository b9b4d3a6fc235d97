"""Policy specs, the transformers scorer/policy on a tiny real Qwen2, and the OpenAI-compatible chat policy."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
torch.set_num_threads(1)

from envkit.credit.sero import SeroOptions  # noqa: E402
from envkit.errors import EnvkitError  # noqa: E402
from envkit.oracles.model_policies import OpenAIChatPolicy, TransformersPolicy, clean_action, make_policy  # noqa: E402
from envkit.oracles.prompts import render, turn_messages  # noqa: E402
from envkit.oracles.scorers import TransformersScorer, make_scorer  # noqa: E402
from envkit.policies import PolicyInput, RandomAdmissiblePolicy, ScriptedPolicy  # noqa: E402
from envkit.runtime.models import ModelConfig, load_model  # noqa: E402

ADM = {"admissible_actions": ["left", "right", "stay", "teleport"]}


@pytest.fixture(scope="module")
def tiny():
    return load_model(ModelConfig(path="tiny:bytes", hidden_size=32, layers=1, heads=2, device="cpu"))


def test_policy_specs(tmp_path):
    assert isinstance(make_policy("random", seed=3), RandomAdmissiblePolicy)
    f = tmp_path / "a.json"
    f.write_text(json.dumps(["right", "left"]))
    p = make_policy(f"scripted:{f}")
    assert isinstance(p, ScriptedPolicy) and p.act([PolicyInput("o", {})]) == ["right"]
    g = tmp_path / "a.txt"
    g.write_text("stay\n\nright\n")
    assert make_policy(f"scripted:{g}").script == ["stay", "right"]  # type: ignore[attr-defined]
    with pytest.raises(EnvkitError, match="unknown policy spec"):
        make_policy("hf:")
    with pytest.raises(EnvkitError, match="name the served model"):
        make_policy("openai:http://localhost:1/v1")
    with pytest.raises(EnvkitError, match="http"):
        make_policy("openai:localhost#m")
    with pytest.raises(EnvkitError, match="bad options"):
        make_policy("hf:tiny:bytes?colour=red")
    assert clean_action("\n  go north \nbecause") == "go north"


def test_scorer_matches_a_direct_forward_pass(tiny):
    model, tok = tiny
    scorer = TransformersScorer(model, tok, batch_size=3)
    xs = [PolicyInput(f"You are at cell {i}.", ADM) for i in range(3)]
    acts = ["right", "teleport", "x"]
    got = scorer.loglik(xs, acts)
    for x, a, v in zip(xs, acts, got):
        p = tok(render(tok, turn_messages(x)), add_special_tokens=False)["input_ids"]
        ids = p + tok(a, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        want = sum(float(lp[k - 1, ids[k]]) for k in range(len(p), len(ids))) / (len(ids) - len(p))
        assert v == pytest.approx(want, abs=1e-4)  # padding in the batch changes nothing
        assert v < 0
    seq = scorer.sequence_logprobs(xs[0], ["right", "left"])
    assert seq[0] == pytest.approx(got[0] * len("right"), abs=1e-3)  # byte tokens: 5 tokens
    # the prompt-cache path (default) equals re-encoding prompt + candidate, for candidates of unequal lengths
    cands = ["left", "right", "teleport", "a much longer free-text action", "x"]
    cached = TransformersScorer(model, tok, batch_size=2).sequence_logprobs(xs[1], cands)
    plain = TransformersScorer(model, tok, batch_size=2, prefix_cache=False).sequence_logprobs(xs[1], cands)
    assert cached == pytest.approx(plain, abs=1e-4)


def test_transformers_policy_choose_and_generate(tiny):
    model, tok = tiny
    pol = TransformersPolicy(model, tok, mode="choose", temperature=1.0, seed=1)
    batch = [PolicyInput("You are at cell 0.", ADM, key=k) for k in range(6)]
    a = pol.act(batch)
    assert all(x in ADM["admissible_actions"] for x in a) and a == pol.act(batch)
    greedy = TransformersPolicy(model, tok, mode="choose", temperature=0.0)
    lp = greedy.scorer.sequence_logprobs(batch[0], ADM["admissible_actions"])
    assert greedy.act(batch[:1]) == [ADM["admissible_actions"][max(range(4), key=lambda i: lp[i])]]
    gen = TransformersPolicy(model, tok, mode="generate", temperature=0.0, max_new_tokens=6)
    out = gen.act(batch[:2])
    assert len(out) == 2 and all(isinstance(x, str) and "\n" not in x for x in out)


class _ChatServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/chat/completions endpoint serving the tiny model (greedy)."""

    model = tok = None
    seen: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        text = render(self.tok, body["messages"])
        enc = self.tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = self.model.generate(**enc, max_new_tokens=min(8, body["max_tokens"]), do_sample=False)
        new = self.tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        reply = "go " + "".join(c for c in new if c.isalnum() or c == " ") + f" {len(new)}"
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply + "\nbecause"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_chat_policy_against_a_local_server(tiny):
    _ChatServer.model, _ChatServer.tok = tiny
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        pol = make_policy(f"openai:{url}#tiny?temperature=0&max_tokens=16")
        assert isinstance(pol, OpenAIChatPolicy)
        batch = [PolicyInput(f"You are at cell {k}.", ADM, key=k) for k in range(3)]
        acts = pol.act(batch)
        assert all(a.startswith("go ") and a.split()[-1].isdigit() and "because" not in a for a in acts)
        sent = sorted(_ChatServer.seen, key=lambda b: b["messages"][1]["content"])
        assert [b["messages"] for b in sent] == [turn_messages(x) for x in batch]
        assert all(b["model"] == "tiny" and b["temperature"] == 0 for b in sent)
        with pytest.raises(EnvkitError, match="HTTP 404"):
            OpenAIChatPolicy(f"http://127.0.0.1:{server.server_port}/v2", "tiny").act(batch[:1])
    finally:
        server.shutdown()
    with pytest.raises(EnvkitError, match="cannot reach"):
        OpenAIChatPolicy("http://127.0.0.1:9/v1", "m", timeout=2).act(batch[:1])


@pytest.mark.slow
def test_hf_scorer_weights_in_a_toy_run(tmp_path, tiny):
    from envkit.oracles.pipeline import RunConfig, run

    model, tok = tiny
    out = tmp_path / "hf.jsonl"
    cfg = RunConfig(
        env_id="envkit/Toy-v0",
        env_kwargs={"max_steps": 10},
        max_steps=10,
        sero=SeroOptions(min_budget=7),
        tasks=3,
        group=3,
        workers=1,
        backend="inprocess",
        out=str(out),
        progress=False,
        scorer="hf:tiny:bytes",
        policy="hf:tiny:bytes?mode=choose",
        device="cpu",
    )
    s = run(cfg, policy=TransformersPolicy(model, tok, mode="choose"), scorer=TransformersScorer(model, tok))["totals"]
    assert s["roots_tried"] > 0 and s["continued_to_success"] == s["roots_tried"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    oracle = [r for r in rows if r["is_oracle"]]
    assert oracle and all(r["oracle_loglik"] < 0 for r in oracle)
    assert all(r["action"] in ADM["admissible_actions"] for r in rows if not r["is_oracle"])
    # weights follow the formula from the stored l_j
    by_root: dict[str, list[dict]] = {}
    for r in oracle:
        by_root.setdefault(r["root_id"], []).append(r)
    for rs in by_root.values():
        rs.sort(key=lambda r: r["step"])
        # the first oracle action: 1 (ReachConfig.first="one", the paper's); later ones: the path to them
        assert rs[0]["reach_weight"] == 1.0
        logw = 0.0
        for r in rs[1:]:
            logw += max(rs[rs.index(r) - 1]["oracle_loglik"], math.log(0.05))
            assert r["reach_weight"] == pytest.approx(min(1.0, max(0.05, math.exp(logw))))
    assert make_scorer("uniform").name == "uniform"
