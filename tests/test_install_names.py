"""An install claims only envkit's import names, and no module is importable under two names.

The repository keeps its layer folders at the root (``runtime/``, ``envs/``, ``oracles/``, ``trainers/``, ``serve/``,
``interop/``) and links each into ``envkit/`` (``envkit/envs -> ../envs``), so they install as ``envkit.envs``, ... . PyPI has
distributions that own ``envs`` and ``interop``: a wheel that wrote those names would break them (and they us).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("runtime", "envs", "oracles", "trainers", "serve", "interop")


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_folder_is_linked_under_envkit(layer):
    link = REPO / "envkit" / layer
    assert link.is_symlink() and link.resolve() == (REPO / layer).resolve(), (
        f"envkit/{layer} must be a link to ../{layer} (git keeps it; recreate it with `ln -s ../{layer} envkit/{layer}`)"
    )


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_is_not_importable_under_its_folder_name(layer):
    # the repository root on sys.path (python -m pytest, an editable install) makes `import envs` find the folder
    res = subprocess.run(
        [sys.executable, "-c", f"import {layer}"], cwd=REPO, capture_output=True, text=True, env=_clean_env()
    )
    assert res.returncode != 0 and f"import envkit.{layer}, not {layer}" in res.stderr, res.stderr[-800:]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _build_wheel(out: Path) -> Path:
    # from a copy of the tracked tree (links kept as links), so the build leaves no build/ folder in the checkout
    src = out / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        dst, orig = src / rel, REPO / rel
        if not orig.exists() and not orig.is_symlink():
            continue  # deleted in the work tree, not yet in git
        dst.parent.mkdir(parents=True, exist_ok=True)
        if orig.is_symlink():
            dst.symlink_to(os.readlink(orig))
        else:
            shutil.copy2(orig, dst)
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = out.glob("envkit-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.slow
def test_the_wheel_installs_only_envkit_as_a_top_level_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"envkit"}, f"the wheel writes top-level names other than envkit: {sorted(tops - {'envkit'})}"
    for layer in LAYERS:  # the layers are in it, as files (the links are followed)
        assert f"envkit/{layer}/__init__.py" in names
    assert "envkit/envs/webshop/env.py" in names and "envkit/oracles/cli.py" in names
    assert "envkit/runtime/models.py" in names
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")] or [None]
    if top_level:
        assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["envkit"]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for script in ("envkit-oracle = envkit.oracles.cli:main", "envkit-train = envkit.trainers.cli:main"):
        assert script in text, text


@pytest.mark.slow
def test_envkit_installs_beside_the_envs_distribution_and_both_import(wheel, tmp_path):
    """PyPI's `envs` (an environment-variable helper) owns the import name `envs`; both must work side by side."""
    target = tmp_path / "site"
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel), "envs"],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0 and "envs" in res.stderr and "No matching distribution" in res.stderr:
        pytest.fail(f"the `envs` distribution is not reachable from pip here: {res.stderr[-400:]}")
    assert res.returncode == 0, res.stderr[-2000:]
    code = (
        "import envs, envkit, envkit.runtime, envkit.envs, envkit.oracles, envkit.trainers, envkit.serve, envkit.interop\n"
        "import sys\n"
        "from envs import env\n"  # the envs distribution's own API
        "assert envs.__file__ == sys.argv[1] + '/envs/__init__.py', envs.__file__\n"
        "assert envkit.envs.__file__.startswith(sys.argv[1]), envkit.envs.__file__\n"
        "print('ok')\n"
    )
    env = {**_clean_env(), "PYTHONPATH": str(target)}
    run = subprocess.run(
        [sys.executable, "-c", code, str(target)], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
