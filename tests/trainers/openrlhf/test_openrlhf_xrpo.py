"""XRPO on the OpenRLHF backend: phased planned rollouts with the real planner, ICL corpus, executor and env, and
the experience maker's variable groups + novelty sharpening against envkit.trainers.explorers.xrpo."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from envkit.trainers.explorers.xrpo import XrpoConfig


class IclAwareEngine:
    """A fake engine: succeeds (always 'right') when its context holds solved examples, else drifts ('stay')."""

    def __init__(self, tokenizer):
        self.tok = tokenizer

    async def generate(self, tokens, params, multi_modal_data=None):
        helped = "solved examples" in self.tok.decode(tokens)
        ids = self.tok(("right" if helped else "stay") + self.tok.eos_token, add_special_tokens=False)["input_ids"]
        return SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=ids, text=self.tok.decode(ids), finish_reason="stop", logprobs=None)]
        )

    async def generate_noisy(self, tokens, params, spec):  # pragma: no cover - XRPO plans have no noisy rollouts
        raise AssertionError("no noisy rollouts in XRPO")


class LocalGen:
    """The two methods XrpoRounds needs from the samples generator, run in-process with envkit's real executor."""

    def __init__(self, executor, engine, tokenizer):
        self.executor, self.engine, self.tok = executor, engine, tokenizer
        self._groups = itertools.count()
        self.phases: list[list[tuple[str, int]]] = []

    def new_group(self):
        return f"g{next(self._groups)}"

    def dispatch_plans(self, prompts, labels, plans, images=None, **kw):
        from vllm import SamplingParams

        from envkit.trainers.openrlhf.rollout_actor import run_planned

        self.phases.append([(plan[0].group, len(plan)) for plan in plans])
        params = SamplingParams(temperature=1.0, max_tokens=None)

        async def go():
            return await asyncio.gather(
                *(
                    run_planned(self.executor, self.engine, p, lab, params, 512, self.tok, [s.to_dict() for s in plan])
                    for p, lab, plan in zip(prompts, labels, plans)
                )
            )

        return asyncio.run(go())


def test_phased_rollouts_keep_budget_and_seed_all_fail_prompts(tokenizer):
    import envkit  # noqa: F401
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord
    from envkit.trainers.openrlhf.xrpo_rounds import XrpoRounds

    cfg = BackendConfig(
        explorer="xrpo", env_id="envkit/Toy-v0", n_samples_per_prompt=6, max_turns=3,
        xrpo=XrpoConfig(n0=2, icl_backend="tfidf"),
    )  # fmt: skip
    rounds = XrpoRounds(cfg)
    rounds.corpus.add("other", "You are at cell 0 of 4. The goal is cell 1.", "right")
    gen = LocalGen(GymAgentExecutor(cfg), IclAwareEngine(tokenizer), tokenizer)
    labels = [json.dumps({"seed": i, "options": {"goal": 2, "length": 4}}) for i in range(3)]
    responses = rounds.run(gen, ["{obs}"] * 3, labels, [], step=1, fetch=lambda refs: refs)
    records = [RolloutRecord.from_dict(r["envkit"]) for r in responses]
    assert len(responses) == 3 * 6  # the baseline's budget, exactly
    assert len(gen.phases) >= 2 and all(n == 2 for _, n in gen.phases[0])  # phase 1: n0 each
    by_group: dict[str, list[RolloutRecord]] = {}
    for rec in records:
        by_group.setdefault(rec.spec.group, []).append(rec)
    assert len(by_group) == 3
    n_icl = 0
    for recs in by_group.values():
        assert [r.spec.index for r in recs] == list(range(len(recs)))
        for phase in sorted({r.spec.phase for r in recs}):
            before = [r for r in recs if r.spec.phase < phase]
            now = [r for r in recs if r.spec.phase == phase]
            seeded = bool(before) and not any(r.success for r in before)  # all failed so far -> ICL prefix
            for r in now:
                assert r.spec.prefix.startswith("Here are solved examples") == seeded
                assert r.success == seeded  # this engine only succeeds with solved examples in context
                n_icl += seeded
        assert not any(r.spec.prefix for r in recs if r.spec.phase == 1)
    assert n_icl > 0
    assert rounds.last_stats["xrpo_icl_share"] == pytest.approx(n_icl / 18)
    assert len(rounds.corpus) == 4  # the three problems joined the corpus with their verified solution
    assert rounds.corpus.entries[labels[0]].solution == "right\nright"


def test_variable_groups_and_sharpening_equal_trainer_core(strategy_factory):
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    from envkit.credit.advantages import group_advantages
    from envkit.trainers.explorers.xrpo import sharpen
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.experience import EnvkitExperienceMaker
    from envkit.trainers.openrlhf.rollout_records import INFO_KEY, RolloutSpec
    from tests.trainers.openrlhf.records import T, record

    groups = ["a"] * 5 + ["b"] * 2 + ["c"] * 5
    rewards = [1, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0]
    g = torch.Generator().manual_seed(5)
    rows = []
    for i, (grp, r) in enumerate(zip(groups, rewards)):
        # a success is read from a step's info: one turn spanning the response (no turn for a failure)
        turns = (T("s", "a", 1.0, False, 1, 10**6),) if r else ()
        rec = record(RolloutSpec(grp, i), turns, bool(r)).to_dict()
        mask = torch.tensor([[0, 0, 1, 1, 1, 1]], dtype=torch.bool)
        rows.append(
            Experience(
                sequences=torch.randint(0, 9, (1, 7), generator=g),
                attention_mask=torch.ones(1, 7, dtype=torch.long),
                action_mask=mask,
                action_log_probs=-2 * torch.rand(1, 6, generator=g),
                kl=torch.zeros(1, 6),
                rewards=torch.tensor([float(r)]),
                index=[i],
                info={INFO_KEY: [rec]},
            )
        )
    exps = [Experience.concat_experiences(rows[i : i + 3], 0) for i in range(0, 12, 3)]
    s = [float(e.action_log_probs[b][e.action_mask[b]].mean()) for e in exps for b in range(3)]
    strategy = strategy_factory(4)
    cfg = BackendConfig(explorer="xrpo", n_samples_per_prompt=4, xrpo=XrpoConfig(lambda_n=2.5, kappa=0.5))
    maker = EnvkitExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy, None, config=cfg)
    got = maker.compute_advantages_and_returns(copy.deepcopy(exps))
    base = group_advantages(rewards, groups)
    want = sharpen(base, np.array(rewards, bool), s, groups, lambda_n=2.5, kappa=0.5)
    assert not np.allclose(want, base)  # sharpening really changed some correct rollouts
    adv = torch.cat([e.advantages for e in got])
    for i in range(12):
        torch.testing.assert_close(adv[i][2:], torch.full((4,), float(want[i])), rtol=1e-5, atol=1e-6)
    assert float(got[0].info["envkit/xrpo_rollouts_max"][0]) == 5.0
    assert float(got[0].info["envkit/xrpo_rollouts_min"][0]) == 2.0


def test_clean_icl_loss_prompt_is_refused_on_openrlhf_with_the_way_out():
    from envkit.trainers.openrlhf.config import BackendConfig

    with pytest.raises(ValueError, match="local trainer only"):  # refused when the config is built (resolved once)
        BackendConfig(explorer="xrpo", n_samples_per_prompt=4, xrpo=XrpoConfig(icl_loss_prompt="clean"))
    assert BackendConfig(explorer="xrpo", n_samples_per_prompt=4).xrpo_config().icl_loss_prompt == "augmented"
