"""One group of trajectories + oracle continuations through every backend's SERO credit path, compared exactly.

- the local trainer: `envkit.trainers.local.sero.episode_credit` on `Episode`s (its plain GraphGPO table);
- ``envkit-oracle rollout``: `envkit.oracles.pipeline.credit_task` on `Trajectory`s and `ContinuationOutcome`s;
- the OpenRLHF backend: the rollout side's `sero_rows.oracle_record` replaces the rescued rollouts' records, the
  experience side's `turn_advantages.compute_turn_advantages` credits the batch.

Every policy turn a backend trains gets the same advantage, every oracle action the same weight and weighted
advantage, bit for bit. The one difference is in the batch layout, not the numbers: OpenRLHF's oracle row replaces
the rollout, so that rollout's turns from the root on (its ``policy_suffix``) are credited but not trained.
All three build their tables with one builder (`StepTable.from_paths`; issue 36): groups that end in failure and
truncation, where the old local convention (an unknown terminal node after a failed last step) showed, are compared
in tests/trainers/test_step_table_cross_backend.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("torch")

from envkit.core import Root, Step, Trajectory
from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.reachability import ReachConfig
from envkit.credit.sero import SeroConfig, SeroOptions
from envkit.oracles.continuation import ContinuationOutcome
from envkit.oracles.pipeline import credit_task
from envkit.oracles.reach_weights import Weighted
from envkit.recorder import EpisodeRecorder
from envkit.trainers.local.multi_turn import AgentConfig, Episode
from envkit.trainers.local.sero import episode_credit
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec, Turn
from envkit.trainers.openrlhf.sero_rows import oracle_record
from envkit.trainers.openrlhf.turn_advantages import SampleRow, compute_turn_advantages

# (states before each action + the final observation, actions, invalid flags, success)
GROUP = [
    (["A", "B", "C", "W0"], ["a", "b", "win"], [False, False, False], True),
    (["A", "D", "E", "F", "G"], ["c", "d", "e", "f"], [False] * 4, False),  # cut by the turn cap at G
    (["A", "B", "B", "K"], ["a", "x", "y"], [False, True, False], False),  # an invalid step, then a wrong commit
    (["A", "D", "L", "M"], ["c", "g", "h"], [False] * 3, False),
]
# (trajectory, root step, oracle (state, action, next) steps, l_j, success)
CONTINUATIONS = [
    (1, 4, [("G", "o1", "H"), ("H", "o2", "WIN")], [-2.5, -0.7], True),  # from the final state
    (3, 2, [("L", "o3", "WIN3")], [-0.1], True),
    (3, 1, [("D", "o4", "Z")], [-1.0], False),  # a failed continuation: adds nothing
]
ADV = AdvantageOptions(gamma_g=0.3, beta_g=0.8, beta_e=1.3, invalid_penalty=0.25, reward_scale=7.0, terminal_reward=10)


def _steps(i):
    states, actions, invalid, success = GROUP[i]
    return [
        Step(states[t], a, float(success and t == len(actions) - 1), states[t + 1], success and t == len(actions) - 1,
             False, {"invalid": invalid[t]})
        for t, a in enumerate(actions)
    ]  # fmt: skip


def _episode(i):
    """GROUP[i] as the local trainer's `Episode`: its record is `_steps(i)`, the env's verdict on the last info."""
    steps = _steps(i)
    if GROUP[i][3]:
        steps[-1] = dataclasses.replace(steps[-1], info={**steps[-1].info, "success": True})
    return Episode.from_steps(0, i, GROUP[i][0][0], {}, steps)


def _record(i, episode):
    """The OpenRLHF executor's record of `episode`: its recorder's steps (the one record both backends read), each
    with a token span."""
    turns = tuple(Turn(10 + 4 * t, 12 + 4 * t) for t in range(len(episode.steps)))
    return RolloutRecord(RolloutSpec("g0", i), episode.initial_observation, episode.initial_info, episode.steps, turns)


def _outcomes():
    return [
        ContinuationOutcome(
            Root(0, i, t, steps[0][0]), "native",
            steps=tuple(Step(s, a, float(ok and j == len(steps) - 1), n, ok and j == len(steps) - 1, False,
                             {"invalid": False}, None, True) for j, (s, a, n) in enumerate(steps)),
            success=ok,
        )
        for i, t, steps, _, ok in CONTINUATIONS
    ]  # fmt: skip


def _local(sero):
    episodes = [_episode(i) for i in range(len(GROUP))]
    cfg = AgentConfig(estimator="graphgpo", sero=True, max_turns=4, adv=ADV, sero_opts=sero)
    found = [(episodes[o.root.trajectory], o) for o in _outcomes() if o.success]
    lls = [list(c[3]) for c in CONTINUATIONS if c[4]]
    res = episode_credit(episodes, found, lls, cfg)
    turns, r = [], 0
    for e in episodes:
        turns.append(res.policy.advantages[r : r + len(e.actions)].tolist())
        r += len(e.actions)
    return turns, res.oracle.weights.tolist(), res.oracle.weighted.tolist()


def _pipeline(sero):
    trajs = [
        Trajectory("envkit/Toy-v0", "t", 0, {}, GROUP[i][0][0], {}, tuple(_steps(i)), GROUP[i][3])
        for i in range(len(GROUP))
    ]
    outs = _outcomes()
    ws = [Weighted(tuple(c[3]), ()) for c in CONTINUATIONS]
    _, pol, ora = credit_task(trajs, outs, ws, SeroConfig(**vars(sero)), ADV)
    turns = [[pol[(i, t)].advantage for t in range(len(GROUP[i][1]))] for i in range(len(GROUP))]
    keys = sorted(ora)
    return turns, [ora[k].weight for k in keys], [ora[k].advantage * ora[k].weight for k in keys]


def _openrlhf(sero):
    cfg = BackendConfig(n_samples_per_prompt=4, sero=True, advantage="graphgpo", adv=ADV, sero_opts=sero)
    records = [_record(i, _episode(i)) for i in range(len(GROUP))]  # the local episode's own steps
    for o, c in zip(_outcomes(), CONTINUATIONS, strict=True):
        if o.success:
            i, t = o.root.trajectory, o.root.t
            spans = [(100 + 4 * j, 102 + 4 * j) for j in range(len(o.steps))]
            records[i] = oracle_record(cfg, records[i], t, o, spans, list(c[3]))
    rows = [SampleRow(i, 10.0 * r.success, RolloutRecord.from_dict(r.to_dict())) for i, r in enumerate(records)]
    got = compute_turn_advantages(rows, cfg)
    turns, weights, weighted = [], [], []
    for row, adv, w in zip(rows, got.per_turn, got.weights, strict=True):
        assert row.record is not None
        turns.append([float(a) for a, tr in zip(adv, row.record.turns) if not tr.oracle])
        weights += [float(x) for x, tr in zip(w, row.record.turns) if tr.oracle]
        weighted += [float(a * x) for a, x, tr in zip(adv, w, row.record.turns) if tr.oracle]
    return turns, weights, weighted, rows, got


@pytest.mark.parametrize(
    "sero",
    [SeroOptions(), SeroOptions(same_state="all"), SeroOptions(reach=ReachConfig(first="own", tau_w=2.0))],
    ids=["default", "same_state_all", "first_own"],
)
def test_every_backend_gives_the_same_credit_on_the_same_group(sero):
    local_turns, local_w, local_weighted = _local(sero)
    pipe_turns, pipe_w, pipe_weighted = _pipeline(sero)
    rl_turns, rl_w, rl_weighted, rows, got = _openrlhf(sero)
    assert local_turns == pipe_turns  # every policy turn of every episode, bit for bit
    assert local_w == pipe_w == rl_w and local_weighted == pipe_weighted == rl_weighted
    # OpenRLHF trains the turns its rows hold: the rescued rollouts' turns before the root
    for i, turns in enumerate(rl_turns):
        assert turns == local_turns[i][: len(turns)]
    assert [len(t) for t in rl_turns] == [3, 4, 3, 2]  # row 1: rooted at its final state; row 3: at step 2
    assert rows[3].record is not None and [t.action for t in rows[3].record.policy_suffix] == ["h"]
    # the credit did something: the rescues changed policy rows and gave oracle rows positive weighted advantages
    assert got.stats["sero_rescues"] == 2.0 and got.stats["sero_policy_changed"] > 0
    assert all(x > 0 for x in local_weighted)


def test_sero_off_in_each_backend_is_plain_graphgpo():
    from envkit.credit.advantages import graphgpo_advantages
    from envkit.trainers.local.episode_steps import step_table

    episodes = [_episode(i) for i in range(len(GROUP))]
    cfg = AgentConfig(estimator="graphgpo", sero=True, max_turns=4, adv=ADV)
    plain = graphgpo_advantages(step_table(episodes, cfg), **ADV.graphgpo_kwargs()).advantages
    assert np.array_equal(episode_credit(episodes, [], [], cfg).policy.advantages, plain)
    rows = [SampleRow(i, 0.0, _record(i, e)) for i, e in enumerate(episodes)]
    on = compute_turn_advantages(rows, BackendConfig(n_samples_per_prompt=4, sero=True, advantage="graphgpo", adv=ADV))
    off = compute_turn_advantages(rows, BackendConfig(n_samples_per_prompt=4, advantage="graphgpo", adv=ADV))
    for a, b in zip(on.per_turn, off.per_turn, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(np.concatenate(off.per_turn), plain)


# ----- the same group with exact state keys (issue 26): the observation text aliases B with D ----------------------
def _seen(state: str) -> str:
    """The observation text of a state: B and D read the same ("room"); every state's env key is its name."""
    return "room" if state in ("B", "D") else f"obs {state}"


def _keyed_step(s, a, r, n, done, invalid, oracle=False):
    info = {"invalid": invalid, "state_key": n, **({"success": True} if r > 0 else {})}
    return Step(_seen(s), a, r, _seen(n), done, False, info, None, oracle)


def _keyed_trajs():
    out = []
    for states, actions, invalid, success in GROUP:
        steps = tuple(
            _keyed_step(states[t], a, float(success and t == len(actions) - 1), states[t + 1],
                        success and t == len(actions) - 1, invalid[t])
            for t, a in enumerate(actions)
        )  # fmt: skip
        out.append(Trajectory("envkit/Toy-v0", "t", 0, {}, _seen("A"), {"state_key": "A"}, steps, success))
    return out


def _keyed_outcomes():
    return [
        ContinuationOutcome(
            Root(0, i, t, _seen(steps[0][0])), "native",
            steps=tuple(_keyed_step(s, a, float(ok and j == len(steps) - 1), n, ok and j == len(steps) - 1, False,
                                    True) for j, (s, a, n) in enumerate(steps)),
            success=ok,
        )
        for i, t, steps, _, ok in CONTINUATIONS
    ]  # fmt: skip


def _recorded(traj):
    """`traj`'s steps fed to an `EpisodeRecorder`, as `play_specs(record=True)` feeds them (no snapshots here)."""
    rec = EpisodeRecorder(traj.initial_observation, traj.initial_info, snapshots=False)
    for s in traj.steps:
        rec.step(None, s.action, s.next_observation, s.reward, s.terminated, s.truncated, s.info)
    rec.stop()
    assert rec.steps == traj.steps
    return rec


def _keyed_backends(adv):
    """(local, pipeline, OpenRLHF) policy-turn advantages and oracle weighted advantages of the keyed group."""
    sero = SeroOptions()
    trajs, outs = _keyed_trajs(), _keyed_outcomes()
    episodes = []
    for i, traj in enumerate(trajs):
        e = Episode(0, i, None, [1], [1], [], [], _recorded(traj), done=True)
        assert e.success == traj.success  # the env's verdict, read from the record
        episodes.append(e)
    acfg = AgentConfig(estimator="graphgpo", sero=True, max_turns=4, adv=adv, sero_opts=sero)
    found = [(episodes[o.root.trajectory], o) for o in outs if o.success]
    res = episode_credit(episodes, found, [list(c[3]) for c in CONTINUATIONS if c[4]], acfg)
    local = (res.policy.advantages.tolist(), res.oracle.weighted.tolist())
    _, pol, ora = credit_task(trajs, outs, [Weighted(tuple(c[3]), ()) for c in CONTINUATIONS], SeroConfig(), adv)
    pipe = ([pol[k].advantage for k in sorted(pol)], [ora[k].advantage * ora[k].weight for k in sorted(ora)])
    bcfg = BackendConfig(n_samples_per_prompt=4, sero=True, advantage="graphgpo", adv=adv, sero_opts=sero)
    records = [_record(i, e) for i, e in enumerate(episodes)]  # the local episodes' own steps
    for o, c in zip(outs, CONTINUATIONS, strict=True):
        if o.success:
            i, t = o.root.trajectory, o.root.t
            spans = [(100 + 4 * j, 102 + 4 * j) for j in range(len(o.steps))]
            records[i] = oracle_record(bcfg, records[i], t, o, spans, list(c[3]))
    rows = [SampleRow(i, 10.0 * r.success, RolloutRecord.from_dict(r.to_dict())) for i, r in enumerate(records)]
    got = compute_turn_advantages(rows, bcfg)
    rl_pol, rl_ora = [], []
    for row, a, w in zip(rows, got.per_turn, got.weights, strict=True):
        assert row.record is not None
        rl_pol.append([float(x) for x, tr in zip(a, row.record.turns) if not tr.oracle])
        rl_ora += [float(x * y) for x, y, tr in zip(a, w, row.record.turns) if tr.oracle]
    return local, pipe, (rl_pol, rl_ora, got.stats)


def test_every_backend_groups_by_the_env_state_key_the_same_way():
    local, pipe, (rl_pol, rl_ora, stats) = _keyed_backends(ADV)  # adv.state_key unset: env (every state has one)
    assert local == pipe and local[1] == rl_ora and stats["state_key_env"] == 1.0
    flat, r = [], 0
    for i, turns in enumerate(rl_pol):  # OpenRLHF trains the turns before each rescued rollout's root
        n = len(GROUP[i][1])
        assert turns == local[0][r : r + len(turns)]
        flat.append(local[0][r : r + n])
        r += n
    # with the exact keys the credit is the unaliased group's (test above: states named by their keys) bit for bit
    plain_turns, _, plain_weighted = _local(SeroOptions())
    assert flat == plain_turns and local[1] == plain_weighted
    # the observation key merges B with D ("room"): other numbers, again equal across backends
    obs_adv = AdvantageOptions(**{**vars(ADV), "state_key": "observation"})
    local_o, pipe_o, (_, rl_ora_o, stats_o) = _keyed_backends(obs_adv)
    assert local_o == pipe_o and local_o[1] == rl_ora_o and stats_o["state_key_observation"] == 1.0
    assert local_o[0] != local[0]
