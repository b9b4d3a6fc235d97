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

Cost (2 busy cores): the GRPO arm (2 iterations + 1 resumed) ~4-6 min; marked ``vllm`` and ``slow`` (CI runs
it). The other arms are marked ``openrlhf_e2e`` too.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.openrlhf_e2e, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[3]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("openrlhf_e2e", REPO / "scripts" / "openrlhf_e2e.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory, openrlhf_imports: Any) -> Any:
    if not openrlhf_imports.real_vllm:
        pytest.skip("real vLLM not installed (.ci/install.d/35-vllm.sh)")
    out = tmp_path_factory.mktemp("openrlhf_e2e")
    os.environ.setdefault("ENVKIT_RAY_TMPDIR_ROOT", str(out))
    return _script(), out


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def check_training(run: dict[str, Any], iterations: int = 2) -> None:
    """The checks every arm shares (module doc)."""
    assert run["rc"] == 0, f"run failed (rc {run['rc']}); see its run.log"
    assert run["cpu_shim_lines"] >= 2, "the CPU shim did not announce itself"
    steps = run["steps"]
    assert len(steps) >= iterations, steps
    for s in steps:
        assert _finite(s.get("policy_loss")), s
        assert _finite(s.get("kl", 0.0)), s
    syncs = [e for e in run["syncs"] if e["event"] == "sync"]
    assert len(syncs) >= iterations, run["syncs"]
    start = next(e for e in run["syncs"] if e["event"] == "start")
    probes = [start["probe_logprob"]]
    versions = [0]
    for e in syncs:
        assert e["engine_equal"] is True, e
        assert e["tensors"] > 0 and e["changed_since_last"] > 0, e  # the update changed the actor's tensors
        assert e["engine_versions"][0] > versions[-1], e  # the engine took new weights (EDEN's cache version)
        versions.append(e["engine_versions"][0])
        assert abs(e["engine_probe_logprob"][0] - e["actor_probe_logprob"]) < 0.05 * abs(e["actor_probe_logprob"])
        probes.append(e["actor_probe_logprob"])
    assert all(a != b for a, b in zip(probes, probes[1:])), probes  # every update moves the fixed probe
    engine = [e["engine_probe_logprob"][0] for e in syncs]
    assert all(a != b for a, b in zip(engine, engine[1:])), engine  # ... and the engine's copy moves with it


def test_grpo_math_two_iterations_weight_sync_checkpoint_and_resume(e2e: Any) -> None:
    script, out = e2e
    summary = script.run_arm("grpo_math", out, "cpu", timeout=1500)
    run = summary["run"]
    check_training(run)
    print(f"\n[openrlhf e2e] grpo_math: {run['wall_s']} s wall, peak PSS {run['peak_pss_gib']} GiB (RSS sum {run['peak_rss_sum_gib']}), steps {run['steps']}")
    assert {"global_step1", "global_step2"} <= {p.split("_", 1)[-1] for p in summary["checkpoints"]} or any(
        "global_step2" in p for p in summary["checkpoints"]
    ), summary["checkpoints"]
    resumed = summary["resume"]
    assert resumed["rc"] == 0, "the resumed run failed; see resume.log"
    first = resumed["syncs"]
    start = next(e for e in first if e["event"] == "start")
    last = [e for e in run["syncs"] if e["event"] == "sync"][-1]
    assert start["actor_digest"] == last["actor_digest"]  # the checkpoint restored exactly the trained weights
    assert [s["step"] for s in resumed["steps"]] == [3], resumed["steps"]  # and training continued at step 3
    syncs = [e for e in first if e["event"] == "sync"]
    assert syncs[0]["changed_since_last"] == 0 and syncs[0]["engine_equal"]  # the resume broadcast
    assert syncs[-1]["changed_since_last"] > 0 and syncs[-1]["engine_equal"]  # step 3's update
