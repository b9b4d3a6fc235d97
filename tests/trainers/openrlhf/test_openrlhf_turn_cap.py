"""The OpenRLHF executor stops episodes at the resolved turn cap: with --sero and --max-turns 0 the env's
horizon (as the local trainer and envkit-oracle do), without --sero only the env's own step limit."""

from __future__ import annotations

import asyncio

import pytest

from tests.trainers.openrlhf.test_openrlhf_sero import LABEL, StayActor


@pytest.mark.parametrize(("sero", "turns", "reason"), [(False, 30, "env_truncated"), (True, 20, "max_turns")])
def test_sero_episodes_stop_at_the_envs_horizon_and_plain_ones_at_the_envs_own_limit(tokenizer, sero, turns, reason):
    from vllm import SamplingParams

    import envkit  # noqa: F401
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor
    from envkit.trainers.openrlhf.rollout_actor import run_planned
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec
    from envkit.trainers.sero_options import TrainerSeroOptions

    cfg = BackendConfig(
        env_id="envkit/Toy-v0", env_kwargs={"max_steps": 30}, n_samples_per_prompt=2, sero=sero,
        advantage="graphgpo", sero_opts=TrainerSeroOptions(roots_per_group=0),
    )  # fmt: skip
    assert cfg.max_turns == 0 and cfg.turn_cap == (20 if sero else None)  # Toy's EnvEntry.horizon is 20
    specs = [RolloutSpec("g", i).to_dict() for i in range(2)]
    out = asyncio.run(
        run_planned(
            GymAgentExecutor(cfg), StayActor(tokenizer), "{obs}", LABEL, SamplingParams(max_tokens=None), 4096,
            tokenizer, specs,
        )
    )  # fmt: skip
    records = [RolloutRecord.from_dict(r["envkit"]) for r in out]
    assert [(len(r.turns), r.reason) for r in records] == [(turns, reason)] * 2
