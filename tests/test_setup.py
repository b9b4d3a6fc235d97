"""The set-up steps (.ci/install.d, run by scripts/setup.sh and .ci/run): a step that cannot run here says what
it skipped and why (exit 3), and under CI=true the same situation is a failure (exit 1)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STEP = REPO / ".ci" / "install.d" / "00-apt.sh"


def _bin_without_apt(tmp_path: Path) -> Path:
    """A PATH folder with the few programs the step's shell needs, and no dpkg / apt-get."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "dirname", "id", "cat", "mktemp"):
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    return bindir


def _run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(_bin_without_apt(tmp_path)), "HOME": str(tmp_path), "CI": ci}
    return subprocess.run(["bash", str(STEP)], capture_output=True, text=True, timeout=60, env=env)


def test_apt_step_without_apt_skips_and_says_why(tmp_path):
    done = _run(tmp_path, ci="")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("skipped: system packages (build-essential cmake chromium chromium-driver bubblewrap")
    assert "no dpkg/apt-get here" in done.stdout


def test_apt_step_without_apt_fails_under_ci(tmp_path):
    done = _run(tmp_path, ci="true")
    assert done.returncode == 1
    assert done.stderr.startswith("error: CI=true and system packages (") and "no dpkg/apt-get here" in done.stderr


def test_setup_lists_the_skips_at_the_end(tmp_path):
    # A copy of the repository's scripts with one step that skips and one that succeeds.
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / ".ci" / "install.d").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    shutil.copy(REPO / ".ci" / "install.d" / "lib.sh", root / ".ci" / "install.d" / "lib.sh")
    (root / ".ci" / "install.d" / "00-skip.sh").write_text(
        'source "$(dirname "$0")/lib.sh"\nskip "Thing" "no thing here"\n'
    )
    (root / ".ci" / "install.d" / "10-ok.sh").write_text("echo fine\n")
    env = {**os.environ, "CI": ""}
    done = subprocess.run(["bash", str(root / "scripts" / "setup.sh")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "skipped: Thing: no thing here" in done.stdout and "fine" in done.stdout
    assert done.stdout.rstrip().endswith(
        "Skipped on this machine (the tests that need these skip with the same reason):\n  - Thing: no thing here"
    )
    done = subprocess.run(
        ["bash", str(root / "scripts" / "setup.sh")], capture_output=True, text=True, env={**env, "CI": "true"}
    )
    assert done.returncode == 1 and "error: CI=true and Thing cannot be set up: no thing here" in done.stderr


@pytest.mark.parametrize(
    "path", ["scripts/setup.sh", *sorted(str(p.relative_to(REPO)) for p in (REPO / ".ci" / "install.d").glob("*.sh"))]
)
def test_scripts_parse(path):
    done = subprocess.run(["bash", "-n", str(REPO / path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_constraints_file_is_one_sorted_exact_pin_per_line():
    lines = (REPO / "constraints.txt").read_text().splitlines()
    assert lines[0].startswith("# "), "constraints.txt starts with its comment header"
    pins = [x for x in lines if x.strip() and not x.startswith("#")]
    names = [x.split("==")[0] for x in pins]
    assert all(x.count("==") == 1 and " " not in x for x in pins), [x for x in pins if x.count("==") != 1]
    assert names == sorted(names) and len(set(names)) == len(names)
    pinned = dict(x.split("==") for x in pins)
    for name, version in {
        "torch": "2.13.0",
        "transformers": "5.15.0",
        "openrlhf": "0.11.2",
        "deepspeed": "0.19.6",
        "ray": "2.55.0",
    }.items():
        assert pinned[name] == version
