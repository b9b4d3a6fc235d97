"""SERO on the OpenRLHF backend: real roots, restore and ToyOracle continuations on envkit/Toy-v0 inside the
agent executor's group step; oracle rows replace failed rollouts: the policy episode's record (its prefix turns,
its suffix as ``policy_suffix``, its own failure) plus the oracle's turns with their l_j and weights."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import numpy as np
import pytest

LABEL = json.dumps({"seed": 0, "options": {"goal": 2, "length": 4}})


class StayActor:
    """Policy that never moves ('stay'), and a deterministic prompt-logprobs scorer."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.scored: list[list[int]] = []

    async def generate(self, tokens, params, multi_modal_data=None):
        ids = self.tok("stay" + self.tok.eos_token, add_special_tokens=False)["input_ids"]
        lps = [{t: SimpleNamespace(logprob=-0.2)} for t in ids]
        return SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=ids, text=self.tok.decode(ids), finish_reason="stop", logprobs=lps)]
        )

    async def prompt_logprobs(self, tokens):
        self.scored.append(list(tokens))
        return [-0.05 * (i % 7) for i in range(len(tokens) - 1)]


@pytest.mark.parametrize(("share", "n_rows"), [(0.0, 0), (0.25, 1), (0.5, 2)])
def test_oracle_rows_replace_failed_rollouts(tokenizer, share, n_rows):
    """Four identical failed episodes: select_roots keeps distinct states and gives every episode a root before
    any gets a second, so the two roots are trajectory 0's final state and trajectory 1's state one step earlier
    (its final state is trajectory 0's): two rows are replaced when the share allows two."""
    from vllm import SamplingParams

    import envkit  # noqa: F401
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor
    from envkit.trainers.openrlhf.rollout_actor import run_planned
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec
    from envkit.trainers.sero_options import TrainerSeroOptions

    cfg = BackendConfig(
        env_id="envkit/Toy-v0", n_samples_per_prompt=4, max_turns=4, sero=True, advantage="graphgpo",
        sero_opts=TrainerSeroOptions(roots_per_group=2, max_oracle_share=share),
    )  # fmt: skip
    ex = GymAgentExecutor(cfg)
    actor = StayActor(tokenizer)
    specs = [RolloutSpec("g0", i).to_dict() for i in range(4)]
    params = SamplingParams(temperature=1.0, max_tokens=None, logprobs=1)
    out = asyncio.run(run_planned(ex, actor, "{obs}\n", LABEL, params, 512, tokenizer, specs))
    records = [RolloutRecord.from_dict(r["envkit"]) for r in out]
    oracle = [i for i, r in enumerate(records) if r.oracle]
    assert len(out) == 4  # the batch keeps its size
    assert len(oracle) == n_rows  # capped by max_oracle_share and by distinct root trajectories
    assert not ex._episodes  # snapshots released with the group
    for i in oracle:
        rec, row = records[i], out[i]
        t = rec.extra["root_t"]
        # the record stays the failed policy episode's: its score, its turns (prefix here, the rest as suffix)
        assert not rec.success and row["scores"] == 0.0 and rec.spec == RolloutSpec("g0", i)
        assert row["extra_logs"]["envkit_success"] == 0.0 and row["extra_logs"]["envkit_oracle"] == 1.0
        assert [s.action for s in rec.steps[:t]] == ["stay"] * t and all(tr.weight == 1.0 for tr in rec.turns[:t])
        assert not any(tr.oracle for tr in rec.turns[:t]) and [s.action for s in rec.policy_suffix] == ["stay"] * (
            4 - t
        )
        plain = records[3].steps  # rollout 3 is never replaced: the same episode as every other one here
        assert [(x.observation, x.action, x.next_observation) for x in rec.policy_steps()] == [
            (x.observation, x.action, x.next_observation) for x in plain
        ]
        ora, ora_steps = rec.turns[t:], rec.steps[t:]
        assert all(tr.oracle for tr in ora) and all(s.is_oracle for s in ora_steps)
        assert [s.action for s in ora_steps] == ["right", "right"] and ora_steps[-1].reward == 1.0
        toks = row["observation_tokens"]
        assert toks[: ora[0].start] == actor.scored[oracle.index(i)][: ora[0].start]
        for tr, st in zip(ora, ora_steps, strict=True):
            assert tokenizer.decode(toks[tr.start : tr.end]) == st.action + tokenizer.eos_token
        lps = actor.scored and [-0.05 * (k % 7) for k in range(len(toks) - 1)]
        loglik = [float(np.mean(lps[tr.start - 1 : tr.end - 1])) for tr in ora]
        want = cfg.sero_opts.reach.weights(loglik)
        assert [tr.loglik for tr in ora] == pytest.approx(loglik)
        assert [tr.weight for tr in ora] == pytest.approx(want.tolist())
        assert want[0] == 1.0 and want[1] == pytest.approx(np.exp(loglik[0]))  # the paper's weighting: first = 1
        assert row["action_ranges"] == [(tr.start, tr.end) for tr in rec.turns]
        assert len(row["rollout_log_probs"]) == len(toks)
    for i, r in enumerate(records):
        if i not in oracle:
            assert not r.success and r.reason == "max_turns" and [s.action for s in r.steps] == ["stay"] * 4


def test_sero_off_keeps_no_episodes(tokenizer):
    from vllm import SamplingParams

    import envkit  # noqa: F401
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor
    from envkit.trainers.openrlhf.rollout_actor import run_planned
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec

    ex = GymAgentExecutor(BackendConfig(env_id="envkit/Toy-v0", n_samples_per_prompt=2, max_turns=2))
    specs = [RolloutSpec("g", i).to_dict() for i in range(2)]
    out = asyncio.run(
        run_planned(ex, StayActor(tokenizer), "{obs}", LABEL, SamplingParams(max_tokens=None), 256, tokenizer, specs)
    )
    assert len(out) == 2 and not ex._episodes and "episode" not in out[0]["envkit"]["extra"]


def test_sero_settings_that_cannot_work_are_refused_with_the_fix():
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.sero_options import TrainerSeroOptions

    with pytest.raises(ValueError, match="--advantage graphgpo"):
        BackendConfig(env_id="envkit/Toy-v0", sero=True, advantage="gigpo")
    with pytest.raises(ValueError, match=r"SERO roots need 8 steps.*--max-turns 4 leaves no SERO root.*at least 8"):
        BackendConfig(env_id="envkit/WebShop-v0", sero=True, advantage="graphgpo", max_turns=4)
    BackendConfig(env_id="envkit/WebShop-v0", sero=True, advantage="graphgpo", max_turns=8)
    BackendConfig(
        env_id="envkit/WebShop-v0",
        sero=True,
        advantage="graphgpo",
        max_turns=4,
        sero_opts=TrainerSeroOptions(min_budget=2),
    )
