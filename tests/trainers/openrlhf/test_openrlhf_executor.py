"""The Gymnasium agent executor against a fake engine object on a real envkit env (envkit/Toy-v0), the planned
rollouts of the rollout actor, and the executor -> samples generator -> experience maker pipeline."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
import torch

LABEL = json.dumps({"seed": 0, "options": {"goal": 2, "length": 4}})


class ScriptedEngine:
    """A fake vLLM engine: answers each generate() with the next scripted action, as token ids + EOS."""

    def __init__(self, tokenizer, actions, logprob=-0.5):
        self.tok = tokenizer
        self.actions = list(actions)
        self.calls: list[list[int]] = []
        self.params: list = []
        self.logprob = logprob

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.calls.append(list(prompt_token_ids))
        self.params.append(sampling_params)
        text = self.actions.pop(0) + self.tok.eos_token
        ids = self.tok(text, add_special_tokens=False)["input_ids"][: sampling_params.max_tokens]
        lps = [{t: SimpleNamespace(logprob=self.logprob)} for t in ids]
        finish = "stop" if len(ids) < sampling_params.max_tokens else "length"
        return SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=ids, text=self.tok.decode(ids), finish_reason=finish, logprobs=lps)]
        )


def _params(**kw):
    from vllm import SamplingParams

    return SamplingParams(temperature=1.0, max_tokens=None, logprobs=1, **kw)


def _executor(**cfg):
    import envkit  # noqa: F401  (registers envkit/Toy-v0)
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor

    return GymAgentExecutor(BackendConfig(env_id="envkit/Toy-v0", n_samples_per_prompt=2, **cfg))


def _run(executor, tokenizer, actions, max_length=256, label=LABEL, prompt="Task: {obs}\nAct:"):
    engine = ScriptedEngine(tokenizer, actions)
    out = asyncio.run(executor.execute(prompt, label, _params(), max_length, tokenizer, engine))
    return out, engine


def test_episode_records_turns_tokens_in_tokens_out(tokenizer):
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord

    ex = _executor()
    out, engine = _run(ex, tokenizer, ["jump", "right", "right"])
    rec = RolloutRecord.from_dict(out["envkit"])
    assert [s.action for s in rec.steps] == ["jump", "right", "right"]
    assert list(rec.invalid) == [True, False, False]
    assert [s.reward for s in rec.steps] == [0.0, 0.0, 1.0]
    assert rec.success and out["scores"] == 1.0 and out["reward"] == 1.0
    assert rec.reason == "terminated" and not rec.truncated and out["truncated"] is False
    first_obs = rec.steps[0].observation
    assert first_obs.startswith("You are at cell 0 of 4. The goal is cell 2.")
    assert rec.steps[2].observation.startswith("You are at cell 1")  # the raw observation, no history
    # token-in/token-out: every engine input extends the previous one; nothing earlier is re-tokenised
    toks = out["observation_tokens"]
    for a, b in zip(engine.calls, engine.calls[1:]):
        assert b[: len(a)] == a
    assert toks[: len(engine.calls[-1])] == engine.calls[-1]
    assert engine.calls[0] == tokenizer(f"Task: {first_obs}\nAct:", add_special_tokens=False)["input_ids"]
    for (s, e), turn, step in zip(out["action_ranges"], rec.turns, rec.steps, strict=True):
        assert (turn.start, turn.end) == (s, e)
        assert tokenizer.decode(toks[s:e]) == step.action + tokenizer.eos_token
    # the observation after turn 1 was appended with the feedback template, tokenised once
    s1, e1 = out["action_ranges"][0]
    s2, _ = out["action_ranges"][1]
    fb = tokenizer("\n" + rec.steps[1].observation + "\n", add_special_tokens=False)["input_ids"]
    assert toks[e1:s2] == fb
    assert len(out["rollout_log_probs"]) == len(toks)
    assert out["rollout_log_probs"][s1:e1] == [-0.5] * (e1 - s1) and out["rollout_log_probs"][e1] == 0.0
    assert rec.mean_logprob == pytest.approx(-0.5)


@pytest.mark.parametrize(
    ("cfg", "kwargs", "actions", "max_length", "reason"),
    [
        ({"max_turns": 2}, {}, ["left", "left", "left"], 256, "max_turns"),
        ({"env_kwargs": {"max_steps": 2}}, {}, ["left", "stay", "left"], 256, "env_truncated"),
        ({}, {}, ["left"] * 50, 60, "context"),
    ],
)
def test_truncation_is_reported(tokenizer, cfg, kwargs, actions, max_length, reason):
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord

    out, engine = _run(_executor(**cfg), tokenizer, actions, max_length=max_length)
    rec = RolloutRecord.from_dict(out["envkit"])
    assert rec.reason == reason and rec.truncated and out["truncated"] is True
    assert not rec.success
    assert len(out["observation_tokens"]) <= max_length
    assert all(p.max_tokens <= max_length - len(c) for p, c in zip(engine.params, engine.calls))


def test_labels_and_envs(tokenizer):
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.gym_executor import RolloutTask

    cfg = BackendConfig(env_id="envkit/Toy-v0", env_kwargs={"max_steps": 5})
    assert RolloutTask.from_label("7", cfg) == RolloutTask("envkit/Toy-v0", 7, {}, {"max_steps": 5})
    t = RolloutTask.from_label('{"env": "envkit/Other-v0", "options": {"goal": 1}, "kwargs": {"max_steps": 9}}', cfg)
    assert (t.env_id, t.seed, t.options, t.kwargs) == ("envkit/Other-v0", None, {"goal": 1}, {"max_steps": 9})
    with pytest.raises(ValueError, match="neither JSON nor an integer seed"):
        RolloutTask.from_label("goal two", cfg)
    with pytest.raises(ValueError, match="--env was not given"):
        RolloutTask.from_label("3", BackendConfig())
    ex = _executor()
    _run(ex, tokenizer, ["right", "right"])
    _run(ex, tokenizer, ["right", "right"])
    assert sum(len(v) for v in ex._free.values()) == 1  # the env was reused, not rebuilt


class FakeActor:
    """Stands in for the vLLM rollout actor: records which path each generation took."""

    def __init__(self, tokenizer, actions):
        self.engine = ScriptedEngine(tokenizer, actions)
        self.noisy_calls: list = []

    async def generate(self, tokens, params, multi_modal_data=None):
        return await self.engine.generate(tokens, params)

    async def generate_noisy(self, tokens, params, spec):
        self.noisy_calls.append((list(tokens), spec))
        return await self.engine.generate(tokens, params)


def test_planned_rollouts_noise_only_the_first_turn_and_keep_specs(tokenizer):
    from envkit.trainers.openrlhf.rollout_actor import run_planned
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec

    specs = [
        RolloutSpec("g0", 0, temperature=0.7),
        RolloutSpec("g0", 1, temperature=0.9, noisy=True, anchor=5, rho=0.1, seed=3),
        RolloutSpec("g0", 2, prefix="Solved: 1+1=2\n"),
    ]
    actor = FakeActor(tokenizer, ["right", "right"] * 3)
    out = asyncio.run(
        run_planned(_executor(), actor, "Task: {obs}\n", LABEL, _params(), 256, tokenizer, [s.to_dict() for s in specs])
    )
    records = [RolloutRecord.from_dict(o["envkit"]) for o in out]
    assert [r.spec for r in records] == specs
    assert len(actor.noisy_calls) == 1 and actor.noisy_calls[0][1] == specs[1]
    assert sorted(p.temperature for p in actor.engine.params) == [0.7, 0.7, 0.9, 0.9, 1.0, 1.0]
    assert out[2]["prompt"] == "Task: Solved: 1+1=2\n{obs}\n"  # the ICL prefix goes right before the problem
    assert tokenizer.decode(out[2]["observation_tokens"]).startswith("Task: Solved: 1+1=2\nYou are at cell 0")
    # the noisy rollout's recorded tokens are the CLEAN prompt's
    assert out[1]["observation_tokens"][: len(actor.noisy_calls[0][0])] == actor.noisy_calls[0][0]


def test_executor_to_experience_pipeline_gigpo(tokenizer, strategy_factory):
    """Responses of the real executor -> the samples generator's Experience rows -> GiGPO advantages."""
    from envkit.credit.advantages import StepTable, gigpo_advantages
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.experience import EnvkitExperienceMaker
    from envkit.trainers.openrlhf.explorers.base import plain_specs
    from envkit.trainers.openrlhf.rollout_actor import run_planned
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec
    from envkit.trainers.openrlhf.samples import EnvkitSamplesGenerator

    strategy = strategy_factory(3, ("--algo.kl.use_loss",))
    cfg = BackendConfig(env_id="envkit/Toy-v0", advantage="gigpo", n_samples_per_prompt=3)
    gen = EnvkitSamplesGenerator(
        config=cfg,
        strategy=strategy,
        prompts_dataloader=None,
        eval_dataloader=None,
        tokenizer=tokenizer,
        vllm_engines=[],
    )
    scripts = [["right", "right"], ["left", "right", "jump"], ["right", "left", "stay"]]
    responses = []
    for script in scripts:  # one planned rollout per script, same group
        actor = FakeActor(tokenizer, script)
        spec = RolloutSpec("g0", len(responses))
        responses += asyncio.run(
            run_planned(_executor(max_turns=3), actor, "{obs}", LABEL, _params(), 256, tokenizer, [spec.to_dict()])
        )
    assert [s.group for s in plain_specs("g0", 3)] == ["g0"] * 3
    samples = [gen._process_response_into_experience(r, max_len=256) for r in responses]
    maker = EnvkitExperienceMaker(None, None, None, None, SimpleNamespace(value=0.0), strategy, tokenizer, config=cfg)
    batch = maker.split_rollout_samples(samples)
    for e in batch:
        e.kl = torch.zeros_like(e.action_mask, dtype=torch.float32)
    got = maker.compute_advantages_and_returns(batch)
    records = [RolloutRecord.from_dict(r["envkit"]) for r in responses]
    table = StepTable(
        group=["g0"] * 8,
        trajectory=[i for i, r in enumerate(records) for _ in r.turns],
        step=[j for r in records for j in range(len(r.turns))],
        # the Toy env offers an exact key, so the default (--adv.state-key unset) groups by it, not by the text
        # each state's key is in its info: the record's first state's, then each step's (the state it leads to)
        state=[([r.info] + [s.info for s in r.steps])[j]["state_key"] for r in records for j in range(len(r.steps))],
        # --adv.terminal-reward unset: 10 x success on the last step, as the local trainer credits (not the env's rewards)
        reward=[10.0 * (r.success and j == len(r.steps) - 1) for r in records for j in range(len(r.steps))],
        invalid=[v for r in records for v in r.invalid],
        next_state=[s.info["state_key"] for r in records for s in r.steps],
        success=[r.success for r in records for _ in r.turns],
    )
    want = gigpo_advantages(table).advantages
    adv = [row for e in got for row in e.advantages]
    k = 0
    for i, rec in enumerate(records):
        for turn in rec.turns:
            torch.testing.assert_close(
                adv[i][turn.start - 1 : turn.end - 1],
                torch.full((turn.end - turn.start,), float(want[k])),
                rtol=1e-5,
                atol=1e-5,
            )
            k += 1
    assert [r.success for r in records] == [True, False, False]
    assert maker.last_stats.get("state_key_env") == 1.0  # which key the batch used is logged
    assert "_envkit" not in got[0].info


@pytest.mark.slow
def test_webshop_episode_with_oracle_actions(tokenizer):
    """A real multi-turn env: the fake engine replays WebShop's own oracle actions (after one invalid click)."""
    import gymnasium as gym

    import envkit  # noqa: F401
    from envkit.oracles.base import make_oracle, run_oracle
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord

    env = gym.make("envkit/WebShop-v0")
    obs, info = env.reset(seed=3)
    plan = [s.action for s in run_oracle(env, make_oracle("envkit/WebShop-v0"), obs, info, max_steps=15).steps]
    ex = GymAgentExecutor(BackendConfig(env_id="envkit/WebShop-v0", n_samples_per_prompt=2))
    out, engine = _run(ex, tokenizer, ["click[no such button]", *plan], max_length=4096, label="3", prompt="{obs}\n")
    rec = RolloutRecord.from_dict(out["envkit"])
    assert [s.action for s in rec.steps] == ["click[no such button]", *plan]
    assert rec.invalid[0] and not any(rec.invalid[1:])
    assert rec.success and rec.reason == "terminated" and out["scores"] == 1.0
    assert rec.steps[0].observation == obs
    assert rec.steps[1].observation.startswith("Invalid action") and rec.steps[1].observation.endswith(obs)  # same page
    for a, b in zip(engine.calls, engine.calls[1:]):
        assert b[: len(a)] == a


def test_rollouts_of_one_prompt_share_the_episode_without_a_seed(tokenizer):
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord

    ex = _executor(max_turns=1)
    a, _ = _run(ex, tokenizer, ["stay"], label="", prompt="task A {obs}")
    b, _ = _run(ex, tokenizer, ["stay"], label="", prompt="task A {obs}")
    first = [RolloutRecord.from_dict(o["envkit"]).steps[0].observation for o in (a, b)]
    assert first[0] == first[1]
    others = {
        RolloutRecord.from_dict(_run(ex, tokenizer, ["stay"], label="", prompt=f"task {i} {{obs}}")[0]["envkit"])
        .steps[0]
        .observation
        for i in range(8)
    }
    assert len(others) > 1  # different prompts, different episodes
