"""Load and faults: 32 concurrent remote sessions on one server; a SIGKILLed server; a resumed oracle run."""

from __future__ import annotations

import threading
import time

import gymnasium
import numpy as np
import pytest

import envkit
from envkit.credit.sero import SeroOptions
from envkit.errors import EnvkitError
from envkit.oracles.pipeline import RunConfig, run
from envkit.remote import EnvServerError

TOY, SHOP = "envkit/Toy-v0", "envkit/WebShop-v0"
pytestmark = pytest.mark.slow  # each test starts its own server


def _episode(env, seed: int, n: int = 8) -> list[tuple[object, ...]]:
    """Reset, play n admissible actions with a snapshot/restore round trip in the middle; the transitions."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out: list[tuple[object, ...]] = [(obs,)]
    for i in range(n):
        if i == n // 2:
            s = env.snapshot()
            env.step(info["admissible_actions"][0])
            obs, info = env.restore(s)
            out.append(("restored", obs))
        a = info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))]
        obs, r, term, trunc, info = env.step(a)
        out.append((a, obs, float(r), term, trunc))
        if term or trunc:
            break
    return out


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_32_concurrent_remote_webshop_sessions_match_local_envs(make_server, scheme):
    srv = make_server(SHOP, "--max-sessions", "40").start()
    url = srv.url.replace("http", scheme, 1)
    n = 32
    results: dict[int, object] = {}
    barrier = threading.Barrier(n)

    def worker(i: int) -> None:
        try:
            env = envkit.make(SHOP, remote=url)
            barrier.wait(60)  # all 32 sessions are open at once
            results[i] = _episode(env, seed=i)
            env.close()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert time.perf_counter() - t0 < 300
    local = gymnasium.make(SHOP)
    for i in range(n):
        assert not isinstance(results[i], Exception), results[i]
        assert results[i] == _episode(local, seed=i), f"session {i} differs from the local env"
    deadline = time.perf_counter() + 30  # a closed WebSocket's env finishes closing after the client saw it
    while True:
        info = envkit.make(SHOP, remote=srv.url).server_info
        if info["sessions"] == 0 or time.perf_counter() > deadline:
            break
        time.sleep(0.1)
    assert info["sessions"] == 0  # every session closed, nothing leaked
    assert info["snapshots"] == 0


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_sigkilled_server_gives_a_clear_error_mid_episode_not_a_hang(make_server, scheme):
    srv = make_server(TOY).start()
    env = envkit.make(TOY, remote=srv.url.replace("http", scheme, 1), timeout=30)
    env.reset(seed=0)
    env.step("right")
    srv.kill()
    t0 = time.perf_counter()
    with pytest.raises(EnvServerError, match="env server") as err:
        env.step("right")
    assert time.perf_counter() - t0 < 5
    assert "restart envkit-serve" in str(err.value) or "cannot connect" in str(err.value)
    with pytest.raises(EnvServerError, match="cannot connect"):
        envkit.make(TOY, remote=srv.url)


def _cfg(tmp_path, name, **kw):
    base = dict(
        env_id=SHOP,
        tasks=6,
        group=2,
        sero=SeroOptions(roots_per_group=1),
        workers=2,
        backend="inprocess",
        seed=0,
        progress=False,
    )
    return RunConfig(out=str(tmp_path / name), **{**base, **kw})


@pytest.mark.slow
def test_oracle_run_over_remote_envs_resumes_after_the_server_is_killed(make_server, tmp_path):
    # --state-keys: the remote run keys states as the local one does (the server drops them unless told)
    srv = make_server(SHOP, "--oracle", "--state-keys").start()
    remote = {"remote": srv.url}

    def kill_after_first_chunk(_n: int) -> None:
        srv.kill()

    with pytest.raises(EnvkitError, match="env server"):
        run(_cfg(tmp_path, "r.jsonl", env_kwargs=remote, chunk_tasks=2), on_chunk=kill_after_first_chunk)
    journal = (tmp_path / "r.jsonl.journal.jsonl").read_text().splitlines()
    assert journal, "the first chunk was journaled before the kill"
    srv.start()  # same port: the same --env-kwarg remote=URL
    resumed = run(_cfg(tmp_path, "r.jsonl", env_kwargs=remote, chunk_tasks=2))
    assert 0 < resumed["session"]["tasks_run"] < 6
    assert resumed["session"]["continuations"] > 0  # SERO restored roots and ran the oracle on the server
    full = run(_cfg(tmp_path, "local.jsonl"))
    assert (tmp_path / "r.jsonl").read_text() == (tmp_path / "local.jsonl").read_text()
    assert resumed["totals"]["tasks"] == full["totals"]["tasks"] == 6
