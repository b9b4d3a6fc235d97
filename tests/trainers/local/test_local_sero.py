"""SERO in the local trainer on the real Toy-v0 env and its oracle, with a tiny random byte-level model.

A random model almost never reaches Toy-v0's goal, so its groups are all-fail: exactly where SERO must restore
roots, let the oracle finish in the live env, and give the group a learning signal.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.credit.advantage_options import AdvantageOptions  # noqa: E402
from envkit.credit.reachability import ReachConfig, reachability_weights  # noqa: E402
from envkit.credit.sero import SeroOptions  # noqa: E402
from envkit.runtime.models import ModelConfig  # noqa: E402
from envkit.trainers.local.agent_source import AgentSource  # noqa: E402
from envkit.trainers.local.contracts import Budget  # noqa: E402
from envkit.trainers.local.explorers.plain import PlainEpisodes  # noqa: E402
from envkit.trainers.local.generation import batch_sequences, score  # noqa: E402
from envkit.trainers.local.multi_turn import AgentConfig  # noqa: E402
from envkit.trainers.local.prompt_encoding import encode_text  # noqa: E402
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig  # noqa: E402
from envkit.trainers.sero_options import TrainerSeroOptions  # noqa: E402

torch.set_num_threads(1)
TINY = ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1)


def _cfg(tmp_path, **agent) -> TrainConfig:
    kw = {"max_turns": 8, "max_context_tokens": 1500, "estimator": "graphgpo", "sero": True, **agent}
    return TrainConfig(
        task="envkit/Toy-v0", model=TINY, run_dir=str(tmp_path), steps=2, prompts_per_step=2, group_size=4,
        max_new_tokens=6, agent=AgentConfig(**kw), tensorboard=False, plot=False, progress=False,
    )  # fmt: skip


@pytest.fixture()
def trainer(tmp_path):
    t = LocalTrainer(_cfg(tmp_path))
    t.model.eval()
    return t


def _batch(trainer, seed=5, **agent):
    cfg = _cfg(trainer.run_dir, **agent) if agent else trainer.cfg
    return AgentSource(cfg, trainer.model, trainer.tok, PlainEpisodes(cfg, trainer.model, trainer.tok)).batch(
        0, seed=seed
    )


def test_oracle_rows_are_the_episode_ids_then_the_oracle_actions_with_reachability_weights(trainer):
    batch, m = _batch(trainer)
    n_ep = trainer.cfg.prompts_per_step * trainer.cfg.group_size
    assert m["success_rate"] == 0.0  # a random byte model never reaches the goal: every group is all-fail
    assert m["sero_tried"] >= 1 and m["sero_restored"] == m["sero_tried"] and m["sero_native"] == m["sero_tried"]
    assert m["sero_succeeded"] >= 1 and m["sero_rows"] == m["sero_succeeded"] - m["sero_too_long"] >= 1
    assert len(batch) == m["rows_in_loss"] == n_ep + m["sero_rows"]
    tok = trainer.tok
    pad = tok.pad_token_id
    for i in range(n_ep, len(batch)):
        prompt, resp, flags, adv = batch.prompts[i], batch.responses[i], batch.loss_flags[i], batch.advantages[i]
        assert len(resp) == len(flags) == len(adv)
        # Token-in/token-out: the row starts with some episode's own ids (prompt + turns before the root).
        first = flags.index(1)
        # (a root at an episode's final state: all of its ids, then the root observation appended)
        assert any(
            batch.prompts[j] == prompt
            and (batch.responses[j][:first] == resp[:first] or resp[: len(batch.responses[j])] == batch.responses[j])
            for j in range(n_ep)
        )
        assert all(a == 0.0 for a, f in zip(adv, flags, strict=True) if not f)
        # The flagged runs are the oracle's actions (text ids + EOS), each a Toy-v0 action.
        runs, cur = [], []
        for t, f in zip(resp, flags, strict=True):
            if f:
                cur.append(t)
            elif cur:
                runs.append(cur)
                cur = []
        if cur:
            runs.append(cur)
        for r in runs:
            assert r[-1] == tok.eos_token_id
            assert tok.decode(r[:-1]) in ("left", "right", "stay", "teleport")
            assert r[:-1] == encode_text(tok, tok.decode(r[:-1]))
        # Weights recomputed from a plain forward: w_0 = 1 (reach.first="one", default; "own" the ablation),
        # w_k from the earlier actions' means.
        ids, attn, target = batch_sequences([prompt], [resp], pad, "cpu")
        with torch.no_grad():
            lp = score(trainer.model, ids, attn, target, with_entropy=False).logp[0, len(prompt) - 1 :]
        spans, s = [], None
        for k, f in enumerate([*flags, 0]):
            if f and s is None:
                s = k
            elif not f and s is not None:
                spans.append((s, k))
                s = None
        loglik = [float(lp[a:b].mean()) for a, b in spans]
        w = reachability_weights(loglik, p_floor=0.05, tau_w=1.0, w_min=0.05)
        assert w[0] == 1.0 and np.all(np.diff(w) <= 1e-12)  # the paper's formula
        assert np.array_equal(ReachConfig().weights(loglik), w)  # the default is the paper's formula
        own = ReachConfig(first="own").weights(loglik)
        assert own[0] == pytest.approx(max(min(np.exp(max(loglik[0], np.log(0.05))), 1.0), 0.05), abs=1e-6)
        assert np.array_equal(own[1:], w[1:])
        # Each span carries one advantage value (GraphGPO credit x its weight).
        for a, b in spans:
            assert len(set(adv[a:b])) == 1
    assert 0.0 < m["sero_weight_mean"] <= 1.0
    # the diagnostics of docs/methods.md (SERO) are in every SERO step's metrics
    assert m["sero_rescues"] == m["sero_rows"] and m["sero_oracle_actions"] >= m["sero_rows"]
    assert 0.0 <= m["sero_w_min_share"] <= 1.0 and m["sero_first_loglik"] < 0.0
    assert {"sero_policy_mass", "sero_policy_mass_plain", "sero_oracle_mass", "sero_policy_changed"} <= set(m)


def test_sero_turns_all_fail_groups_into_signal(trainer):
    _, plain = _batch(trainer, sero=False)
    _, sero = _batch(trainer)
    assert plain["success_rate"] == sero["success_rate"] == 0.0  # same episodes (same seeds)
    assert plain["zero_adv_fraction"] == 1.0
    # the signal is the oracle rows': continuations the env confirmed, with positive weighted credit. The random
    # model's actions are all invalid here, so every policy step is the same self-loop at the start state and
    # the policy rows stay at 0 (issue 36: the local table used to point each failed episode's last step to an
    # unknown terminal node, which told identical transitions apart and gave those rows a spurious signal)
    assert sero["sero_rows"] >= 1 and sero["sero_oracle_mass"] > 0.0


def test_oracle_share_cap_and_exact_row_budget(trainer):
    _, m = _batch(trainer, sero_opts=TrainerSeroOptions(max_oracle_share=0.0))
    assert m["sero_rows"] == 0 and m["sero_tried"] == 0 and m["sero_capped"] >= 1
    assert TrainerSeroOptions(max_oracle_share=0.25).max_oracle_rows(12) == 4  # 4 of 16 rows = 25%
    assert TrainerSeroOptions(max_oracle_share=0.5).max_oracle_rows(3) == 3
    assert TrainerSeroOptions(max_oracle_share=0.2).max_oracle_rows(8) == 2
    assert TrainerSeroOptions(max_oracle_share=0.0).max_oracle_rows(8) == 0


def test_a_group_the_cap_leaves_without_a_rescue_keeps_zero_advantage_and_is_counted(trainer):
    """What the README's WebShop + SERO step shows (`zero_adv_fraction` 0.5, issue 35): 2 all-fail groups x 4
    episodes, the 25% cap allows 2 oracle rows for the step, both go to the first group's roots (groups are
    served in order) and the second group, all invalid actions, gets no rescue and keeps zero advantage. The metric
    is the share of groups whose rows are all zero (docs/methods.md section 1), a group's oracle rows included:
    a group whose only signal is its rescue is not zero-advantage (recomputed here from the batch's rows)."""
    batch, m = _batch(trainer, sero_opts=TrainerSeroOptions(max_oracle_share=0.25))
    assert m["success_rate"] == 0.0 and m["invalid_share"] == 1.0  # both groups all-fail, every action invalid
    assert m["sero_rows"] == 2 and m["sero_capped"] >= 1  # the cap, not the oracle, stopped the rescues
    n_policy = len(batch) - int(m["sero_rows"])
    assert n_policy == 8
    assert all(max(abs(x) for x in a) > 0 for a in batch.advantages[n_policy:])  # the first group's oracle rows
    assert all(max(abs(x) for x in a) == 0 for a in batch.advantages[4:8])  # the unrescued second group
    assert m["zero_adv_fraction"] == 0.5
    _, none = _batch(trainer, sero_opts=TrainerSeroOptions(max_oracle_share=0.0))
    assert none["sero_rows"] == 0 and none["zero_adv_fraction"] == 1.0


def test_bad_sero_settings_are_refused_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="estimator='graphgpo'"):
        AgentConfig(sero=True, estimator="gigpo")
    with pytest.raises(ValueError, match="multi-turn envkit task with an oracle"):
        TrainConfig(task="arith", agent=AgentConfig(sero=True, estimator="graphgpo"))
    with pytest.raises(ValueError, match="max_oracle_share"):
        TrainerSeroOptions(max_oracle_share=1.5)
    with pytest.raises(ValueError, match="p_floor"):
        SeroOptions(reach=ReachConfig(p_floor=0.0))


def test_the_env_s_registered_facts_are_the_defaults_and_a_turn_cap_below_the_root_budget_is_refused():
    web = AgentConfig(estimator="graphgpo", sero=True).for_env("envkit/WebShop-v0")
    assert (web.max_turns, web.adv.gamma_g, web.sero_opts.min_budget) == (15, 0.20, 8)  # EnvEntry: 15, 0.20, 8
    alf = AgentConfig(estimator="graphgpo", sero=True).for_env("envkit/ALFWorld-v0")
    assert (alf.max_turns, alf.adv.gamma_g, alf.sero_opts.min_budget) == (50, 0.10, 20)
    plain = AgentConfig(estimator="graphgpo").for_env("envkit/WebShop-v0")
    assert (plain.max_turns, plain.adv.gamma_g) == (8, 0.20)  # without SERO the turn cap stays 8
    mine = AgentConfig(
        estimator="graphgpo",
        sero=True,
        max_turns=9,
        adv=AdvantageOptions(gamma_g=0.5, terminal_reward=10.0),
        sero_opts=SeroOptions(min_budget=3),
    ).for_env("envkit/WebShop-v0")
    assert (mine.max_turns, mine.adv.gamma_g, mine.sero_opts.min_budget) == (9, 0.5, 3)  # what a user sets stays
    with pytest.raises(ValueError, match=r"SERO roots need 8 steps.*agent.max_turns 6.*at least 8.*horizon is 15"):
        AgentConfig(estimator="graphgpo", sero=True, max_turns=6).for_env("envkit/WebShop-v0")
    with pytest.raises(ValueError, match="at least 8"):
        TrainConfig(task="envkit/WebShop-v0", agent=AgentConfig(estimator="graphgpo", sero=True, max_turns=6))
    AgentConfig(estimator="graphgpo", sero=True, max_turns=6, sero_opts=SeroOptions(min_budget=2)).for_env(
        "envkit/WebShop-v0"
    )  # a lower root budget, set on purpose, is allowed
    cfg = TrainConfig(task="envkit/Toy-v0", agent=AgentConfig(estimator="graphgpo", sero=True))
    assert cfg.agent.max_turns == 20 and Budget.of(cfg).group_size == cfg.group_size  # the config resolves it


def test_envkit_train_local_with_sero_runs_and_logs_the_sero_metrics(tmp_path):
    import subprocess

    from envkit.trainers.local.metrics import read_metrics

    run = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "envkit.trainers.cli", "local", "--task", "envkit/Toy-v0",
        "--model.path", "tiny:bytes", "--model.hidden-size", "32", "--model.layers", "1",
        "--steps", "1", "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "6",
        "--agent.estimator", "graphgpo", "--agent.sero", "True", "--agent.max-turns", "8",
        "--agent.max-context-tokens", "1500", "--agent.sero-opts.roots-per-group", "1",
        "--run-dir", str(run), "--tensorboard", "False", "--plot", "False", "--progress", "False",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (rec,) = read_metrics(run / "metrics.jsonl")
    assert rec["sero_tried"] <= 2  # one root per group
    assert {"sero_tried", "sero_restored", "sero_succeeded", "sero_rows", "sero_weight_mean"} <= set(rec)


@pytest.mark.slow  # ~20 s: 8 ALFWorld episodes of 30 turns, then oracle continuations in the real engine
def test_sero_on_alfworld_restores_natively_and_the_oracle_finishes(tmp_path, alfworld_data):
    pytest.importorskip("alfworld")
    cfg = TrainConfig(
        task="envkit/ALFWorld-v0", model=TINY, run_dir=str(tmp_path), steps=1, prompts_per_step=2, group_size=4,
        max_new_tokens=20, tensorboard=False, plot=False, progress=False,
        agent=AgentConfig(max_turns=30, max_context_tokens=12000, estimator="graphgpo", sero=True),
    )  # fmt: skip
    trainer = LocalTrainer(cfg)
    trainer.model.eval()
    batch, m = trainer.source.batch(0, seed=1)
    assert m["success_rate"] == 0.0 and m["sero_tried"] >= 1
    assert m["sero_native"] == m["sero_restored"] == m["sero_tried"] and m["sero_diverged"] == 0
    assert m["sero_rows"] >= 1 and len(batch) == 8 + m["sero_rows"]
    assert m["zero_adv_fraction"] < 1.0


def test_supervised_rows_are_the_same_continuations_with_advantage_one_and_plain_policy_credit(trainer):
    """``agent.sero_rows="supervised"`` (issue 32's oracle-data control): the same roots and continuations as SERO,
    every oracle action token at advantage exactly 1, the policy rows exactly plain GraphGPO's."""
    sero, ms = _batch(trainer)
    sup, m = _batch(trainer, sero_rows="supervised")
    plain, _ = _batch(trainer, sero=False)
    n_ep = trainer.cfg.prompts_per_step * trainer.cfg.group_size
    assert m["sero_rows"] == ms["sero_rows"] >= 1 and len(sup) == len(sero)  # same episodes, same continuations
    assert sup.responses == sero.responses and sup.loss_flags == sero.loss_flags
    assert sup.advantages[:n_ep] == plain.advantages[:n_ep]  # policy rows: plain GraphGPO
    for adv, flags in zip(sup.advantages[n_ep:], sup.loss_flags[n_ep:], strict=True):
        assert [a for a, f in zip(adv, flags, strict=True) if f] == [1.0] * sum(flags)
        assert all(a == 0.0 for a, f in zip(adv, flags, strict=True) if not f)
    with pytest.raises(ValueError, match="sero_rows must be 'credit' or 'supervised'"):
        AgentConfig(sero_rows="both")  # type: ignore[arg-type]
