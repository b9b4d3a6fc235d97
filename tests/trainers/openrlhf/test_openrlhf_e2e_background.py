"""The background end-to-end run (`scripts/openrlhf_e2e.Background`, started by this folder's conftest when
collection ends): a run that dies says where its log is instead of letting a test wait out its timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def test_a_background_run_that_ends_without_the_summary_fails_fast_with_its_log(
    tmp_path: Path, e2e_script: Any
) -> None:
    bg = e2e_script.Background(["no_such_arm"], tmp_path / "out", tmp_path / "ray")  # argparse refuses the arm
    with pytest.raises(RuntimeError, match=r"ended \(rc 2\) without no_such_arm's summary: see .*background\.log"):
        bg.summary("no_such_arm", timeout=120)
    assert "invalid choice: 'no_such_arm'" in bg.log.read_text()
    bg.stop()  # already ended: a no-op


def test_asking_for_an_arm_the_background_run_does_not_run_is_refused(tmp_path: Path, e2e_script: Any) -> None:
    bg = e2e_script.Background(["no_such_arm"], tmp_path / "out", tmp_path / "ray")
    try:
        with pytest.raises(ValueError, match="not one of the background arms"):
            bg.summary("grpo_math", timeout=1)
    finally:
        bg.stop()
