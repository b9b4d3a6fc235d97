"""Hostile SWE tool input: every bad action is invalid-action feedback, bounded in time and memory, and the env
keeps serving afterwards."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

MAX_SECONDS = 5.0
MAX_PY_MB = 64


@pytest.fixture()
def agent(swe_agent):
    swe_agent.env.reset(seed=0, options={"index": 2})
    return swe_agent


def bounded(agent, raw: str, *, invalid: bool = True) -> str:
    """Send `raw` as the action; assert the step is fast, lean, (in)valid as told, and the env still serves."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        obs, r, term, trunc, info = agent.env.step(raw)
        seconds = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seconds < MAX_SECONDS, f"step took {seconds:.1f} s"
    assert peak < MAX_PY_MB << 20, f"step allocated {peak >> 20} MiB in the env process"
    assert info["invalid"] is invalid, obs[:500]
    assert r == 0.0 and not term
    assert agent.bash("echo alive").strip() == "alive"
    return obs


def test_create_view_and_edit_on_a_fifo(agent):
    agent.bash("mkfifo pipe.py")
    for call in (
        {"tool": "create", "path": "pipe.py", "file_text": "x = 1\n"},
        {"tool": "view", "path": "pipe.py"},
        {"tool": "str_replace", "path": "pipe.py", "old_str": "x", "new_str": "y"},
    ):
        bounded(agent, json.dumps(call))


@pytest.mark.parametrize("tool", ["view", "create", "str_replace"])
@pytest.mark.parametrize("path", ["a\x00b.py", "more_itertools/\x00", "\ud800.py", "x" * 5000])
def test_bad_paths(agent, tool, path):
    call = {"tool": tool, "path": path, "file_text": "x", "old_str": "a", "new_str": "b"}
    bounded(agent, json.dumps(call))


@pytest.mark.parametrize("field", ["file_text", "old_str", "new_str"])
def test_lone_surrogates_in_text(agent, field):
    call = {"tool": "create" if field == "file_text" else "str_replace", "path": "more_itertools/more.py"}
    call |= {"file_text": "x", "old_str": "def ", "new_str": "def "} | {field: "bad \udcff text"}
    bounded(agent, json.dumps(call))


def test_lone_surrogate_and_nul_in_command(agent):
    bounded(agent, json.dumps({"tool": "bash", "command": "echo \ud800"}))
    obs = bounded(agent, json.dumps({"tool": "bash", "command": "echo a\x00b"}), invalid=False)
    assert "ab" in obs


@pytest.mark.parametrize("timeout", ["1" * 400, "1e400", "NaN", "Infinity", "-Infinity", "-5", "0", "true", '"60"'])
def test_hostile_timeouts(agent, timeout):
    bounded(agent, '{"tool": "bash", "command": "echo hi", "timeout": ' + timeout + "}")


@pytest.mark.parametrize(
    "raw",
    [
        '{"tool": "bash", "command": "true", "x": ' + "[" * 30_000 + "]" * 30_000 + "}",
        '{"tool": "bash", "command": "true", "x": ' + '{"a": ' * 9_000 + "1" + "}" * 9_000 + "}",
        "{" * 60_000,
        '{"a":' * 12_000,
        '{"tool": "bash", "command": "true", "n": ' + "9" * 50_000 + "}",
    ],
    ids=["deep-list", "deep-object", "open-braces", "unclosed-objects", "50k-digit-int"],
)
def test_hostile_json(agent, raw):
    bounded(agent, raw)


def test_view_of_a_16mb_file_is_bounded(agent):
    agent.bash("yes 'some line of text' | head -c 16M > big.txt; yes 'line' | head -c 7M > seven.txt")
    bounded(agent, json.dumps({"tool": "view", "path": "big.txt"}))
    bounded(agent, json.dumps({"tool": "str_replace", "path": "big.txt", "old_str": "some", "new_str": "x"}))
    obs = bounded(agent, json.dumps({"tool": "view", "path": "seven.txt"}), invalid=False)
    assert len(obs) < 20_000 and "truncated" in obs
    obs = bounded(agent, json.dumps({"tool": "view", "path": "seven.txt", "view_range": [1000, 1002]}), invalid=False)
    assert obs.splitlines()[0].split() == ["1000", "line"]


def test_listings_never_follow_symlinks_on_the_host(agent, tmp_path):
    secret = tmp_path / "host-only-dir"
    secret.mkdir()
    (secret / "host-secret-file").write_text("x")
    agent.bash(f"mkdir -p d/sub; ln -s {secret} d/link; ln -s {secret} top; ln -s / d/sub/root")
    obs = bounded(agent, json.dumps({"tool": "view", "path": "d"}), invalid=False)
    assert "/repo/d/link\n" in obs + "\n" and "/repo/d/link/" not in obs and "host-secret-file" not in obs
    assert "/repo/d/sub/root/" not in obs
    obs = bounded(agent, json.dumps({"tool": "view", "path": "/repo"}), invalid=False)
    assert "/repo/top/" not in obs and "host-secret-file" not in obs
    bounded(agent, json.dumps({"tool": "view", "path": "top"}))  # the tools refuse symlinks
    bounded(agent, json.dumps({"tool": "view", "path": "d/link/host-secret-file"}))
    bounded(agent, json.dumps({"tool": "create", "path": "top/planted", "file_text": "x"}))
    assert not (secret / "planted").exists()


def test_huge_directory_listing_is_bounded(agent):
    agent.bash("mkdir many && cd many && seq 30000 | xargs touch", timeout=60)
    obs = bounded(agent, json.dumps({"tool": "view", "path": "many"}), invalid=False)
    assert len(obs) < 20_000
    obs = bounded(agent, json.dumps({"tool": "view", "path": "."}), invalid=False)
    assert len(obs) < 20_000


def test_non_text_and_oversized_actions_are_refused_by_contract(agent):
    """The action space's contract (envkit.snapshot): not text, or longer than its max_length, raises
    InvalidActionError before the env does anything; the episode goes on."""
    from envkit.errors import InvalidActionError

    for raw in (None, 5, b"{}", ["x"], "x" * (5 << 20)):
        with pytest.raises(InvalidActionError):
            agent.env.step(raw)
    assert agent.bash("echo alive").strip() == "alive"
