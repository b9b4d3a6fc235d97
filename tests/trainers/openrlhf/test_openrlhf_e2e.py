"""End to end: ``envkit-train openrlhf --cpu`` runs real ``train_ppo_ray`` iterations on this CPU.

Each test launches the real command line (``python -m envkit.trainers.cli openrlhf --cpu ... -- <OpenRLHF
flags>``, `scripts/openrlhf_e2e.py`) on a tiny random Llama saved locally: a private CPU Ray, OpenRLHF 0.11.2's
own trainer with envkit's subclasses, the real vLLM CPU engine for rollouts, DeepSpeed on its CPU accelerator
(gloo, ZeRO-2, bf16) for the update, the weight broadcast over a gloo group, the next rollouts. Nothing is
mocked; the only stub is ``flash_attn`` (`envkit.trainers.openrlhf.cpu_shim`). Checked from the run's own
outputs (OpenRLHF's step lines, envkit's ``envkit_weight_sync.jsonl``, the checkpoint folder):

- at least 2 iterations; loss and KL finite each step;
- after every broadcast the engine's weights equal the actor's (a checksum per tensor, bf16), and the actor's
  tensors changed since the previous broadcast;
- the next rollouts come from the new weights: the engine's weight version moves, and the log-prob of a fixed
  probe moves under both the actor and the engine (and they agree);
- a checkpoint per step; a resumed run restores exactly the saved weights (same digest of all checksums)
  and trains one more step from it.

Markers: ``openrlhf_e2e``, ``vllm``, ``slow``; the three method arms also ``openrlhf_e2e_full`` (to select them
alone). The selected arms run in one background process started when collection ends (this folder's
conftest, ``ENVKIT_E2E_BACKGROUND=0`` to run them here instead); each test checks its arm's summary. Costs:
docs/openrlhf.md, "CPU mode".
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.openrlhf_e2e, pytest.mark.timeout(1800)]


class Arms:
    """Each arm's summary: from the background run started when collection ended (conftest's `e2e_background`),
    else run here."""

    def __init__(self, script: Any, out: Path, background: Any) -> None:
        self.script, self.background = script, background
        self.out = background.out if background is not None else out

    def summary(self, arm: str) -> dict[str, Any]:
        if self.background is not None and arm in self.background.arms:
            return self.background.summary(arm, timeout=1700)
        return self.script.run_arm(arm, self.out, "cpu", timeout=1500)


@pytest.fixture(scope="module")
def e2e(
    tmp_path_factory: pytest.TempPathFactory, openrlhf_imports: Any, e2e_background: Any, e2e_script: Any
) -> Iterator[Arms]:
    if not openrlhf_imports.real_vllm:
        pytest.skip("real vLLM not installed (.ci/install.d/35-vllm.sh)")
    out = tmp_path_factory.mktemp("openrlhf_e2e")
    # Ray's socket paths must stay under 108 bytes: its temp dirs go to a short folder, removed afterwards
    ray_root = tempfile.mkdtemp(prefix="ekray", dir="/tmp")
    old = os.environ.get("ENVKIT_RAY_TMPDIR_ROOT")
    os.environ["ENVKIT_RAY_TMPDIR_ROOT"] = ray_root
    yield Arms(e2e_script, out, e2e_background)
    if old is None:
        os.environ.pop("ENVKIT_RAY_TMPDIR_ROOT", None)
    else:
        os.environ["ENVKIT_RAY_TMPDIR_ROOT"] = old
    shutil.rmtree(ray_root, ignore_errors=True)


def _report(summary: dict[str, Any]) -> None:
    for part in ("run", "resume"):
        run = summary.get(part)
        if run:
            steps = [{k: st.get(k) for k in ("step", "policy_loss", "kl", "timing/step_total")} for st in run["steps"]]
            print(
                f"\n[openrlhf e2e] {summary['arm']} {part}: rc {run['rc']}, {run['wall_s']} s wall, peak PSS "
                f"{run['peak_pss_gib']} GiB (RSS sum {run['peak_rss_sum_gib']}), steps {steps}"
            )


@pytest.mark.parametrize("arm", ["grpo_math"])
def test_grpo_math_two_iterations_weight_sync_checkpoint_and_resume(e2e: Arms, arm: str) -> None:
    summary, out = e2e.summary(arm), e2e.out
    _report(summary)
    run = summary["run"]
    assert run["rc"] == 0, f"run failed (rc {run['rc']}); see {out}/grpo_math/run.log"
    assert run["cpu_shim_lines"] >= 2, "the CPU shim did not announce itself"
    assert e2e.script.problems(summary) == []
    syncs = [e for e in run["syncs"] if e["event"] == "sync"]
    assert all(e["engine_equal"] and e["changed_since_last"] > 0 for e in syncs)  # (also in problems())
    assert (out / "grpo_math" / "ckpt" / "ds" / "_actor" / "global_step2").is_dir()
    resumed = summary["resume"]
    start = next(e for e in resumed["syncs"] if e["event"] == "start")
    assert start["actor_digest"] == syncs[-1]["actor_digest"]  # the checkpoint restored exactly the trained weights
    assert [st["step"] for st in resumed["steps"]] == [3]  # and training continued from it


@pytest.mark.openrlhf_e2e_full
@pytest.mark.parametrize("arm", ["gigpo_sero_toy", "eden_math", "branch_toy"])
def test_method_arm_two_iterations(e2e: Arms, arm: str) -> None:
    """GraphGPO + SERO on Toy-v0 (oracle rows in the loss), EDEN's prompt-embeds rows, branching: 2 iterations each
    with the weight check; the arm's own rows reached the update (`scripts/openrlhf_e2e.ARM_KEYS`). The SERO arm
    and the branching arm log one group per step (``--credit-log``) and its oracle rows', forks' and policy turns'
    credit, as the loss got it, equals the local trainer's value by value (`scripts/openrlhf_e2e.CREDIT_ARMS`, scripts/openrlhf_credit_check.py)."""
    summary = e2e.summary(arm)
    _report(summary)
    assert e2e.script.problems(summary) == []
    if arm in e2e.script.CREDIT_ARMS:
        credit = summary["run"]["credit"]
        print(f"\n[openrlhf e2e] {arm} credit check: {credit}")
        assert credit["entries"] >= 2 and credit["problems"] == []
        assert credit["oracle_turns"] > 0 if arm == "gigpo_sero_toy" else credit["forks"] > 0
