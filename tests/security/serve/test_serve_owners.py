"""envkit-serve limits per owner (issue 33): each tenant has its own token, and one tenant's sessions and
snapshots cannot take what another's need; a snapshot's charge is a bound, not an estimate.

Before: clients shared one token, so the server could not tell tenants apart (one client could open every
session and use every session's snapshot share), and a snapshot of more objects than the walk visited was
charged twice what it walked (8 MiB of ``{}``: ~35 MiB charged for ~234 MiB held).
Cost: about 5 s (one small server of the Toy env) plus fast unit tests.
"""

from __future__ import annotations

import pytest

TOY = "envkit/Toy-v0"
ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_one_owner_cannot_take_another_owners_sessions_or_snapshot_bytes(serve, wire, tmp_path):
    tokens = tmp_path / "owners"
    tokens.write_text(f"# owner token\nalice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    srv = serve(
        TOY, "--owner-tokens", str(tokens), "--max-sessions", "4", "--max-snapshot-mb", "2",
        "--max-snapshot-mb-per-session", "1", "--env-kwarg", "max_steps=1000",
    )  # fmt: skip
    c = wire.Http(srv)
    opened = []
    for _ in range(2):  # alice's share: 4 sessions / 2 owners
        status, out = c.call("POST", "/envkit/sessions", {}, **bearer(ALICE))
        assert status == 200, out
        opened.append((out["session_id"], out["session_key"]))
    status, out = c.call("POST", "/envkit/sessions", {}, **bearer(ALICE))
    assert status == 503 and "owner 'alice'" in out["error"]["message"], (status, out)
    status, out = c.call("POST", "/envkit/sessions", {}, **bearer(BOB))
    assert status == 200, out  # bob's sessions were never alice's to take
    bob = (out["session_id"], out["session_key"])
    for sid, key in [*opened, bob]:
        h = {**bearer(BOB if (sid, key) == bob else ALICE), "Envkit_Session_Key": key}
        assert c.call("POST", f"/envkit/sessions/{sid}/reset", {"seed": 0}, **h)[0] == 200
        for _ in range(3):
            assert c.call("POST", f"/envkit/sessions/{sid}/step", {"action": "x" * 60_000}, **h)[0] == 200
    refused = []
    for sid, key in opened:  # alice snapshots in both of her sessions until refused
        for _ in range(50):
            status, out = c.call(
                "POST", f"/envkit/sessions/{sid}/snapshot", {}, **bearer(ALICE), Envkit_Session_Key=key
            )
            if status != 200:
                refused.append((status, out["error"]["message"]))
                break
    assert any(s == 409 and "--max-snapshot-mb-per-owner" in m for s, m in refused), refused
    status, info = c.call("GET", "/envkit/info", **bearer(ALICE))
    assert status == 200, info
    assert info["max_snapshot_bytes_per_owner"] == 1 << 20 and info["max_sessions_per_owner"] == 2
    for _ in range(2):  # bob's honest episode still snapshots
        status, out = c.call(
            "POST", f"/envkit/sessions/{bob[0]}/snapshot", {}, **bearer(BOB), Envkit_Session_Key=bob[1]
        )
        assert status == 200, out
    # a session answers only to its owner's token (the session key alone is not enough)
    status, out = c.call(
        "POST", f"/envkit/sessions/{bob[0]}/step", {"action": "right"}, **bearer(ALICE), Envkit_Session_Key=bob[1]
    )
    assert status == 403 and "another owner" in out["error"]["message"], (status, out)
    assert c.call("POST", "/envkit/sessions", {})[0] == 401  # no token, no owner


def test_a_snapshot_too_large_to_walk_is_refused_not_estimated():
    from envkit.errors import SnapshotError
    from envkit.serve.budget import deep_size

    small = [{} for _ in range(1000)]
    assert deep_size(small) >= 1000 * 64  # each {} at least its getsizeof plus overhead
    with pytest.raises(SnapshotError, match="more than 1000 Python objects"):
        deep_size([{} for _ in range(5000)], max_nodes=1000)  # before: charged 2x the 1,000 walked


def test_owner_tokens_file_is_checked(tmp_path):
    from envkit.serve.cli import read_owner_tokens

    good = tmp_path / "good"
    good.write_text(f"alice {ALICE}\n\nbob {BOB}\n")
    assert read_owner_tokens(str(good)) == {"alice": ALICE, "bob": BOB}
    for text, why in ((f"alice {ALICE}\nalice {BOB}\n", "each owner once"), ("alice short\n", "at least 16"),
                      ("alice\n", "expected 'OWNER TOKEN'"), ("# none\n", "names no owner")):  # fmt: skip
        bad = tmp_path / "bad"
        bad.write_text(text)
        with pytest.raises(ValueError, match=why):
            read_owner_tokens(str(bad))


def test_each_session_env_is_built_as_its_owner():
    """Envs that charge native resources per owner (the SWE layer store) see the session's owner: the token's
    owner with --owner-tokens, the session itself with one shared token (its holders cannot be told apart)."""
    import asyncio

    pytest.importorskip("openenv.core.env_server")
    from envkit.serve.models import EnvkitEnvironment
    from envkit.serve.sessions import SessionTable
    from envkit.tenancy import current_owner

    seen: list[str | None] = []

    def factory() -> EnvkitEnvironment:
        seen.append(current_owner())
        return EnvkitEnvironment(TOY, {})

    async def play(owners: tuple[str, ...], owner: str) -> None:
        table = SessionTable(factory, max_sessions=4, owners=owners, max_sessions_per_owner=1)
        s = await table.open("http", owner)
        assert s.owner == owner
        with pytest.raises(Exception, match=f"owner '{owner}' holds its maximum of 1"):
            await table.open("http", owner)
        await table.close_all()

    asyncio.run(play(("alice", "bob"), "alice"))
    asyncio.run(play(("default",), "default"))
    assert seen[0] == "alice" and seen[1].startswith("session-"), seen
    assert current_owner() is None  # set on the session's own thread only
