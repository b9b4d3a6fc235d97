"""The experience-maker subclass on hand-built OpenRLHF ``Experience`` objects (real openrlhf 0.11.2 classes).

- GRPO equals OpenRLHF's own group_norm path (its ``RemoteExperienceMaker``), KL-in-reward included;
- GiGPO / GraphGPO, EDEN and SERO give the trainer-core values (``envkit.credit.advantages``, ``envkit.trainers.explorers``);
- folding weights into advantages equals per-token loss weighting under the real ``PolicyLoss``.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from envkit.trainers.explorers.eden import EdenConfig

N_PER = 4
PROMPT = 5


def _experiences(rewards, lengths, micro=2, seed=0, records=None, kl_scale=0.05):
    """Micro-batches of hand-built Experience rows: prompt of PROMPT tokens, response of lengths[i] tokens."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    from envkit.trainers.openrlhf.rollout_records import INFO_KEY

    g = torch.Generator().manual_seed(seed)
    rows = []
    for i, (r, length) in enumerate(zip(rewards, lengths)):
        total = PROMPT + length
        mask = torch.zeros(total - 1)
        mask[PROMPT - 1 :] = 1
        info = {"reward": torch.tensor([float(r)])}
        if records is not None:
            info[INFO_KEY] = [records[i]]
        rows.append(
            Experience(
                sequences=torch.randint(0, 50, (1, total), generator=g),
                attention_mask=torch.ones(1, total, dtype=torch.long),
                action_mask=mask.unsqueeze(0).bool(),
                action_log_probs=-torch.rand(1, total - 1, generator=g),
                kl=kl_scale * torch.randn(1, total - 1, generator=g),
                rewards=torch.tensor([float(r)]),
                response_length=torch.tensor([length]),
                total_length=torch.tensor([total]),
                truncated=torch.tensor([False]),
                index=[i],
                info=info,
            )
        )
    return [Experience.concat_experiences(rows[i : i + micro], 0) for i in range(0, len(rows), micro)]


def _makers(strategy, config):
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    from envkit.trainers.openrlhf.experience import EnvkitExperienceMaker

    kl = FixedKLController(0.01)
    stock = RemoteExperienceMaker(None, None, None, None, kl, strategy, None)
    ours = EnvkitExperienceMaker(None, None, None, None, kl, strategy, None, config=config)
    return stock, ours


def _record(group, index, turns=(), success=False, noisy=False, oracle=False):
    """A record's wire dict; a success without turns is one turn spanning the whole response (the verdict is
    read from a step's info)."""
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec
    from tests.trainers.openrlhf.records import T, record

    spec = RolloutSpec(group=group, index=index, noisy=noisy, anchor=7 if noisy else -1)
    if success and not turns:
        turns = (T("s", "a", 1.0, False, PROMPT, 10**6),)
    return record(spec, tuple(turns), success, oracle=oracle).to_dict()


REWARDS = [1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0]
LENGTHS = [3, 5, 4, 6, 2, 3, 5, 4, 6, 3, 2, 4]


@pytest.mark.parametrize("with_records", [False, True])
def test_grpo_equals_stock_group_norm(strategy_factory, with_records):
    from envkit.trainers.openrlhf.config import AdvantageOptions, BackendConfig
    from envkit.trainers.openrlhf.rollout_records import INFO_KEY

    strategy = strategy_factory(N_PER)
    assert strategy.args.algo.advantage.estimator == "group_norm"
    records = [_record(f"p{i // N_PER}", i % N_PER, success=bool(r)) for i, r in enumerate(REWARDS)]
    exps = _experiences(REWARDS, LENGTHS, records=records if with_records else None)
    stock, ours = _makers(strategy, BackendConfig(n_samples_per_prompt=N_PER, adv=AdvantageOptions(eps=1e-9)))
    want = stock.compute_advantages_and_returns(copy.deepcopy(exps))
    got = ours.compute_advantages_and_returns(copy.deepcopy(exps))
    for w, g in zip(want, got):
        torch.testing.assert_close(g.advantages, w.advantages, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(g.returns, w.returns, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(g.info["group_reward_std"], w.info["group_reward_std"].float())
        assert torch.equal(g.action_mask, w.action_mask)
        assert g.kl is None and INFO_KEY not in g.info
        assert g.info["envkit/zero_adv_fraction"].shape == (len(g.sequences),)
    # two of the three groups have mixed rewards; the all-zero one... none here: [1,0,0,1],[0,0,0,0],[1,1,1,0]
    assert float(got[0].info["envkit/zero_adv_fraction"][0]) == pytest.approx(1 / 3)


def test_grpo_groups_from_records_not_from_layout(strategy_factory):
    """XRPO's variable groups: a group of 6 and a group of 2, interleaved; stock reshaping cannot express it."""
    from envkit.credit.advantages import group_advantages
    from envkit.trainers.openrlhf.config import BackendConfig

    strategy = strategy_factory(N_PER)
    groups = ["a", "b", "a", "a", "b", "a", "a", "a"]
    rewards = [1, 0, 0, 1, 1, 0, 0, 1]
    records = [_record(g, i, success=bool(r)) for i, (g, r) in enumerate(zip(groups, rewards))]
    exps = _experiences(rewards, [3] * 8, records=records, kl_scale=0.0)
    _, ours = _makers(strategy, BackendConfig(n_samples_per_prompt=N_PER))
    got = ours.compute_advantages_and_returns(exps)
    adv = torch.cat([e.advantages for e in got])
    mask = torch.cat([e.action_mask for e in got]).bool()
    want = group_advantages(rewards, groups, "grpo")
    for i in range(8):
        torch.testing.assert_close(adv[i][mask[i]], torch.full((3,), float(want[i])), rtol=1e-5, atol=1e-6)


def _multi_turn(group_rewards, strategy, advantage, **adv_opts):
    """Multi-turn rows: each turn is 2 action tokens followed by 1 feedback token."""
    from envkit.credit.advantages import StepTable
    from envkit.trainers.openrlhf.config import AdvantageOptions, BackendConfig
    from tests.trainers.openrlhf.records import T

    trajs = {  # (group, trajectory) -> list of (state, reward, invalid)
        ("g0", 0): [("s0", 0.0, False), ("s1", 0.0, False), ("s2", 1.0, False)],
        ("g0", 1): [("s0", 0.0, False), ("s3", 0.0, True)],
        ("g0", 2): [("s0", 0.0, False), ("s1", 0.0, False)],
        ("g1", 0): [("t0", 0.0, True), ("t0", 0.0, False), ("t1", 1.0, False)],
        ("g1", 1): [("t0", 0.0, False), ("t2", 0.0, False)],
    }
    records, rewards, lengths, cols = [], [], [], {k: [] for k in ("group", "trajectory", "step", "state")}
    cols.update({"reward": [], "invalid": [], "next_state": [], "success": []})
    for (g, t), steps in trajs.items():
        turns, pos = [], PROMPT
        for j, (state, r, inv) in enumerate(steps):
            nxt = steps[j + 1][0] if j + 1 < len(steps) else f"end-{g}-{t}"
            turns.append(T(state, f"a{j}", r, inv, pos, pos + 2, next_state=nxt))
            pos += 3
        ret = sum(s[1] for s in steps)
        records.append(_record(g, t, turns, success=ret > 0))
        rewards.append(ret)
        lengths.append(pos - PROMPT)
        for j, (state, r, inv) in enumerate(steps):
            cols["group"].append(g)
            cols["trajectory"].append(t)
            cols["step"].append(j)
            cols["state"].append(state)
            cols["reward"].append(r)
            cols["invalid"].append(inv)
            cols["next_state"].append(steps[j + 1][0] if j + 1 < len(steps) else f"end-{g}-{t}")
            cols["success"].append(ret > 0)
    exps = _experiences(rewards, lengths, records=records, kl_scale=0.0)
    for e in exps:  # feedback tokens are not actions
        for b in range(len(e.sequences)):
            n_act = int(e.action_mask[b].sum())
            for k in range(PROMPT - 1 + 2, PROMPT - 1 + n_act, 3):
                e.action_mask[b, k] = False
    # a success's return 1, as the table's env rewards (unset, both trainers credit 10 x success)
    adv = AdvantageOptions(**{"terminal_reward": 1.0, **adv_opts})
    _, ours = _makers(strategy, BackendConfig(n_samples_per_prompt=3, advantage=advantage, adv=adv))
    got = ours.compute_advantages_and_returns(exps)
    return got, StepTable(**cols), records


@pytest.mark.parametrize("advantage", ["gigpo", "graphgpo"])
def test_multi_turn_advantages_equal_trainer_core(strategy_factory, advantage):
    from envkit.credit.advantages import gigpo_advantages, graphgpo_advantages

    strategy = strategy_factory(3)
    got, table, records = _multi_turn(None, strategy, advantage, gamma=0.9, gamma_g=0.2)
    if advantage == "gigpo":
        want = gigpo_advantages(table, gamma=0.9).advantages
    else:
        want = graphgpo_advantages(table, gamma_g=0.2).advantages
    adv = [row for e in got for row in e.advantages]
    k = 0
    for i, rec in enumerate(records):
        for turn in rec["turns"]:
            span = adv[i][turn["start"] - 1 : turn["end"] - 1]
            torch.testing.assert_close(span, torch.full((2,), float(np.clip(want[k], -10, 10))), rtol=1e-5, atol=1e-5)
            k += 1
    assert k == len(table)
    assert len({round(float(w), 6) for w in want}) > 3  # the table really has distinct per-turn values


def test_eden_absorb_matches_trainer_core_and_drops_by_mask(strategy_factory):
    from envkit.trainers.explorers.eden import eden_advantages
    from envkit.trainers.openrlhf.config import BackendConfig

    strategy = strategy_factory(N_PER)
    noisy = [False, False, True, True] * 3
    rewards = [0, 0, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0]
    groups = [f"p{i // N_PER}" for i in range(12)]
    records = [_record(groups[i], i % N_PER, success=bool(r), noisy=noisy[i]) for i, r in enumerate(rewards)]
    cfg = BackendConfig(
        explorer="eden",
        n_samples_per_prompt=N_PER,
        eden=EdenConfig(n_noisy=2, top_p=0.5, gamma=0.5),
        eden_anchors=(7,),
    )
    want = eden_advantages(rewards, groups, noisy, cfg.eden_config())
    exps = _experiences(rewards, [3] * 12, records=records, kl_scale=0.0)
    _, ours = _makers(strategy, cfg)
    got = ours.compute_advantages_and_returns(exps)
    adv = torch.cat([e.advantages for e in got])
    mask = torch.cat([e.action_mask for e in got]).bool()
    for i in range(12):
        if want.loss_mask[i]:
            assert mask[i].sum() == 3
            torch.testing.assert_close(
                adv[i][mask[i]], torch.full((3,), float(want.advantages[i])), rtol=1e-5, atol=1e-6
            )
        else:
            assert mask[i].sum() == 0 and float(adv[i].abs().sum()) == 0.0
    assert (~want.loss_mask).sum() == 3  # ceil(0.5 * 6) of the 6 noisy rows kept
    assert float(got[0].info["envkit/eden_noisy_kept_share"][0]) == pytest.approx(0.5)


def test_sero_oracle_row_tokens_carry_the_shared_credit_times_the_weights(strategy_factory):
    """An oracle row (the failed rollout's prefix turn, then two oracle turns; its suffix rides as policy_suffix):
    each turn's tokens get `sero_advantages`' value, oracle turns times their reachability weight."""
    from envkit.credit.advantage_options import AdvantageOptions
    from envkit.credit.sero_advantages import Rescue, sero_advantages
    from envkit.credit.step_table import StepTable
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec
    from tests.trainers.openrlhf.records import T, record

    strategy = strategy_factory(2)
    p = PROMPT
    plain = [
        T("s0", "a", 0.0, False, p, p + 2, next_state="s1"),
        T("s1", "c", 0.0, False, p + 2, p + 6, next_state="s4"),
    ]
    prefix = T("s0", "b", 0.0, False, p, p + 2, next_state="s2")
    suffix = (T("s2", "d", 0.0, False, p + 2, p + 4, next_state="s3"),)
    ll = (-0.5, -1.0)
    oracle = [
        T("s2", "o1", 0.0, False, p + 2, p + 4, next_state="s5", oracle=True, loglik=ll[0]),
        T("s5", "o2", 1.0, False, p + 4, p + 6, next_state="won", oracle=True, loglik=ll[1]),
    ]
    records = [
        record(RolloutSpec("g", 0), tuple(plain)).to_dict(),
        record(
            RolloutSpec("g", 1), (prefix, *oracle), oracle=True, extra={"root_t": 1}, policy_suffix=suffix
        ).to_dict(),
    ]
    exps = _experiences([0.0, 0.0], [6, 6], records=records, kl_scale=0.0)
    cfg = BackendConfig(
        n_samples_per_prompt=2, sero=True, advantage="graphgpo", adv=AdvantageOptions(terminal_reward=10)
    )
    _, ours = _makers(strategy, cfg)
    got = ours.compute_advantages_and_returns(exps)
    table = StepTable(
        group=["g"] * 4, trajectory=[0, 0, 1, 1], step=[0, 1, 0, 1], state=["s0", "s1", "s0", "s2"],
        reward=[0.0] * 4, next_state=["s1", "s4", "s2", "s3"], action=["a", "c", "b", "d"],
    )  # fmt: skip
    want = sero_advantages(
        table, [Rescue("g", 1, 1, ("s2", "s5"), ("o1", "o2"), ("s5", "won"), (False,) * 2, ll, 10.0)]
    )
    pol, ora = want.policy.advantages, want.oracle
    assert pol[0] != 0.0 and pol[2] != 0.0  # the rescue separates b (towards the root) from a at s0
    row0 = got[0].advantages[0][p - 1 : p + 5]
    row1 = got[0].advantages[1][p - 1 : p + 5]
    exp0 = [pol[0]] * 2 + [pol[1]] * 4
    exp1 = [pol[2]] * 2 + [ora.weighted[0]] * 2 + [ora.weighted[1]] * 2
    torch.testing.assert_close(row0, torch.tensor(exp0, dtype=torch.float32), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(row1, torch.tensor(exp1, dtype=torch.float32), rtol=1e-6, atol=1e-6)
    assert ora.weights.tolist() == [1.0, np.exp(-0.5)]  # the paper's weighting: the first oracle action weighs 1
    assert float(got[0].info["envkit/sero_rescues"][0]) == 1.0
    assert float(got[0].info["envkit/sero_weight_mean"][0]) == pytest.approx((1.0 + np.exp(-0.5)) / 2)


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_folded_advantages_equal_per_token_loss_weights(dual_clip):
    """The real PolicyLoss on w*A equals the per-token weighted surrogate (envkit.trainers.losses) on A."""
    from openrlhf.models import PolicyLoss

    from envkit.trainers.losses import policy_loss

    g = torch.Generator().manual_seed(3)
    logp = (-torch.rand(4, 7, generator=g)).requires_grad_()
    old = -torch.rand(4, 7, generator=g)
    adv = torch.randn(4, 7, generator=g)
    mask = (torch.rand(4, 7, generator=g) > 0.2).float()
    w = torch.rand(4, 7, generator=g)
    loss_fn = PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip=dual_clip)
    folded, *_ = loss_fn(logp, old, adv * w, action_mask=mask)
    grad_folded = torch.autograd.grad(folded, logp)[0]
    if dual_clip is None:
        weighted, _ = policy_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28, token_weights=w)
    else:  # envkit.trainers.losses has no dual clip: weight OpenRLHF's own per-token loss instead
        ratio = (logp - old).exp()
        s1, s2 = ratio * adv, ratio.clamp(0.8, 1.28) * adv
        per_token = -torch.where(adv < 0, torch.max(torch.min(s1, s2), dual_clip * adv), torch.min(s1, s2))
        weighted = (per_token * w * mask).sum() / mask.sum()
    grad_weighted = torch.autograd.grad(weighted, logp)[0]
    torch.testing.assert_close(folded, weighted, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad_folded, grad_weighted, rtol=1e-6, atol=1e-7)
    # with OpenRLHF's global token normalisation (the path its actor uses) too
    n_tok = mask.sum() * 3
    folded_g, *_ = loss_fn(logp, old, adv * w, action_mask=mask, batch_num_tokens=n_tok)
    torch.testing.assert_close(folded_g, weighted * mask.sum() / n_tok, rtol=1e-6, atol=1e-7)


def test_token_advantages_one_turn_is_openrlhfs_reward_to_go():
    from openrlhf.models.utils import compute_reward

    from envkit.trainers.openrlhf.experience import token_advantages, turn_token_ends

    g = torch.Generator().manual_seed(1)
    mask = torch.tensor([0, 0, 1, 1, 1, 1, 0, 0], dtype=torch.float32)
    kl = torch.randn(8, generator=g)
    r = torch.tensor([12.5])
    stock_reward = compute_reward(r, 0.1, kl.unsqueeze(0), action_mask=mask.unsqueeze(0), reward_clip_range=(-10, 10))
    stock = torch.flip(torch.cumsum(torch.flip(stock_reward[0] * mask, [0]), 0), [0])
    got = token_advantages([12.5], turn_token_ends(None, mask), mask, kl, 0.1, (-10, 10))
    torch.testing.assert_close(got, stock)


def test_truncated_turn_inside_a_padded_micro_batch():
    """A rollout cut by max_len in its second turn, right-padded next to a longer one: each surviving token
    still gets its own turn's advantage."""
    from envkit.trainers.openrlhf.experience import token_advantages, turn_token_ends
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec
    from tests.trainers.openrlhf.records import T, record

    # observation tokens: prompt 0-3, turn0 4-6, feedback 7, turn1 8-12 (cut: the sample has 11 tokens, 0-10)
    rec = record(RolloutSpec("g"), (T("s0", "a", 0, False, 4, 7), T("s1", "b", 1, False, 8, 13)))
    length = 11 - 1  # the sample's own action-mask length
    mask = torch.zeros(16)  # padded to the micro-batch's longest row
    mask[3:6] = 1  # turn0: obs 4-6 -> mask 3-5
    mask[7:10] = 1  # turn1 surviving: obs 8-10 -> mask 7-9
    ends = turn_token_ends(rec, mask, length)
    assert ends == [5, 9]
    assert turn_token_ends(rec, mask) == [5, 11]  # without the length the cut turn's end would fall in padding
    adv = token_advantages([0.5, -2.0], ends, mask, None, 0.0, None)
    torch.testing.assert_close(adv[3:6], torch.full((3,), 0.5))
    torch.testing.assert_close(adv[7:10], torch.full((3,), -2.0))
    assert float(adv[10:].abs().sum()) == 0.0


def test_the_record_is_the_steps_on_the_wire_and_refuses_an_older_one():
    """A record crosses Ray as plain dicts and comes back equal (steps without snapshots); success, return and
    invalid flags are read from its steps (an oracle row: its policy episode's); a record of the older executor
    (steps inside its turns) or one with a turn per step missing is refused with the fix."""
    import json

    from envkit.core import Step
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec, Turn

    steps = (
        Step("s0", "a", 0.0, "s1", False, False, {"invalid": True, "state_key": "k1"}, snapshot=object()),
        Step("s1", "b", 1.0, "s2", True, False, {"success": True, "state_key": "k2"}),
    )
    rec = RolloutRecord(RolloutSpec("g", 1), "s0", {"state_key": "k0"}, steps, (Turn(4, 6), Turn(7, 9)))
    back = RolloutRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back == rec and back.steps[0].snapshot is None  # the snapshot stays with the executor
    assert (back.success, back.episode_return, back.invalid) == (True, 1.0, (True, False))
    oracle = RolloutRecord(
        RolloutSpec("g", 1), "s0", {}, (steps[0], Step("s1", "o", 1.0, "W", True, False, {"success": True}, None, True)),
        (Turn(4, 6), Turn(7, 9, 0.5, True, -0.7)), oracle=True, policy_suffix=(Step("s1", "c", 0.0, "s3", False, True, {}),),
    )  # fmt: skip
    assert [s.action for s in oracle.policy_steps()] == ["a", "c"] and not oracle.success
    assert oracle.episode_return == 0.0
    old = {
        **rec.to_dict(),
        "turns": [{"state": "s0", "action": "a", "reward": 0.0, "invalid": False, "start": 4, "end": 6}],
    }
    with pytest.raises(ValueError, match="older executor"):
        RolloutRecord.from_dict(old)
    with pytest.raises(ValueError, match="one Turn"):
        RolloutRecord(RolloutSpec("g"), "s0", {}, steps, (Turn(4, 6),))
