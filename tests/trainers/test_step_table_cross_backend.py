"""Groups that end in failure and truncation through every backend's step table and turn credit, compared exactly.

Issue 36: the local trainer (`envkit.trainers.local.episode_steps.step_table`), the OpenRLHF backend
(`envkit.trainers.openrlhf.turn_advantages`) and ``envkit-oracle rollout`` (`StepTable.from_trajectories`) used to
build their step tables three ways: after the last step of a failed episode the local table pointed to an unknown
terminal node and the others to the recorded observation; the local table put ``adv.terminal_reward`` on a
success's last step and the others the env's reward. The group below makes both show: episode 1 fails at a state
the successful episode 0 passed through (B), episode 2 is cut by the turn cap, episode 3 fails with an invalid step;
the env's own reward for a success (1.0) differs from ``terminal_reward`` (10). GiGPO, GraphGPO and GraphGPO + SERO
must give every turn the same advantage in every backend, bit for bit. With ``--adv.terminal-reward`` unset on
OpenRLHF (and its scalar reward length-penalised, not 10 x success) the credit is still the local trainer's: one
resolver fills 10 for both (before, OpenRLHF credited the env's rewards and its scalar reward, and these cases failed).
"""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")

from envkit.core import Root, Step, Trajectory
from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.sero import SeroConfig, SeroOptions
from envkit.credit.step_table import StepTable
from envkit.credit.turn_credit import turn_credit
from envkit.oracles.continuation import ContinuationOutcome
from envkit.oracles.pipeline import credit_task
from envkit.oracles.reach_weights import Weighted
from envkit.recorder import EpisodeRecorder
from envkit.trainers.local.agent_source import step_table
from envkit.trainers.local.multi_turn import AgentConfig, Episode
from envkit.trainers.local.sero import episode_credit
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec, Turn
from envkit.trainers.openrlhf.sero_rows import oracle_record
from envkit.trainers.openrlhf.turn_advantages import SampleRow, compute_turn_advantages

# (states before each action + the state after the last one, actions, invalid flags, success, truncated)
GROUP = [
    (["A", "B", "C", "W"], ["a", "b", "win"], [False, False, False], True, False),
    (["A", "D", "E", "B"], ["c", "d", "e"], [False, False, False], False, False),  # fails at B (known to succeed)
    (["A", "D", "F", "G"], ["c", "f", "g"], [False, False, False], False, True),  # cut by the turn cap at G
    (["A", "B", "X", "Y"], ["a", "x", "y"], [False, True, False], False, False),  # an invalid step, then fails at Y
]
CAP = 3
# (trajectory, root step, oracle (state, action, next) steps, l_j): successful continuations
CONTINUATIONS = [(2, 3, [("G", "o1", "H"), ("H", "o2", "WIN")], [-2.5, -0.7]), (3, 2, [("X", "o3", "W2")], [-0.1])]
ADV = AdvantageOptions(gamma_g=0.3, beta_g=0.8, beta_e=1.3, invalid_penalty=0.25, reward_scale=7.0, terminal_reward=10)
ENV_REWARD = 1.0  # the env's own reward for a success (Toy-v0's)


def _info(state: str, invalid: bool = False) -> dict:
    return {"invalid": invalid, "state_key": f"k{state}"}


def _steps(i: int) -> tuple[Step, ...]:
    states, actions, invalid, success, truncated = GROUP[i]
    out = []
    for t, a in enumerate(actions):
        last = t == len(actions) - 1
        info = {**_info(states[t + 1], invalid[t]), **({"success": True} if success and last else {})}  # the verdict
        out.append(Step(states[t], a, ENV_REWARD * (success and last), states[t + 1], success and last,
                        truncated and last, info))  # fmt: skip
    return tuple(out)


def _trajs() -> list[Trajectory]:
    return [Trajectory("envkit/Toy-v0", "t", 0, {}, "A", _info("A"), _steps(i), g[3]) for i, g in enumerate(GROUP)]


def _outcomes() -> list[ContinuationOutcome]:
    return [
        ContinuationOutcome(
            Root(0, i, t, steps[0][0]), "native",
            steps=tuple(Step(s, a, ENV_REWARD * (j == len(steps) - 1), n, j == len(steps) - 1, False, _info(n),
                             None, True) for j, (s, a, n) in enumerate(steps)),
            success=True,
        )
        for i, t, steps, _ in CONTINUATIONS
    ]  # fmt: skip


def _episodes() -> list[Episode]:
    """The group as the local trainer's `play` leaves it: states before each action (the final observation is
    never appended to the context), and the env's steps in the episode's recorder."""
    out = []
    for i, (traj, (states, actions, invalid, success, _)) in enumerate(zip(_trajs(), GROUP, strict=True)):
        rec = EpisodeRecorder("A", _info("A"), snapshots=False)
        for s in traj.steps:
            rec.step(None, s.action, s.next_observation, s.reward, s.terminated, s.truncated, s.info)
        rec.stop()
        e = Episode(0, i, None, [1], [1], [], [], rec, done=True)
        assert (e.success, e.invalid, e.observations[: len(actions)]) == (
            success,
            tuple(invalid),
            tuple(states[: len(actions)]),
        )
        out.append(e)
    return out


def _split(flat: list[float]) -> list[list[float]]:
    out, r = [], 0
    for g in GROUP:
        out.append(flat[r : r + len(g[1])])
        r += len(g[1])
    return out


def _local(estimator: str, adv: AdvantageOptions, sero: bool) -> list[list[float]]:
    episodes = _episodes()
    cfg = AgentConfig(estimator=estimator, sero=sero, max_turns=CAP, adv=adv, sero_opts=SeroOptions())
    if sero:
        found = [(episodes[o.root.trajectory], o) for o in _outcomes()]
        return _split(episode_credit(episodes, found, [c[3] for c in CONTINUATIONS], cfg).policy.advantages.tolist())
    return _split(turn_credit(step_table(episodes, cfg), estimator, adv).advantages.tolist())


def _pipeline(estimator: str, adv: AdvantageOptions, sero: bool) -> list[list[float]]:
    trajs = _trajs()
    if sero:
        ws = [Weighted(tuple(c[3]), ()) for c in CONTINUATIONS]
        _, pol, _ = credit_task(trajs, _outcomes(), ws, SeroConfig(terminal_reward=10.0, gamma_g=0.3), adv)
        return [[pol[(i, t)].advantage for t in range(len(g[1]))] for i, g in enumerate(GROUP)]
    table = StepTable.from_trajectories([trajs], terminal_reward=adv.terminal_reward, state_key=adv.state_key)
    return _split(turn_credit(table, estimator, adv).advantages.tolist())


def _openrlhf(estimator: str, adv: AdvantageOptions, sero: bool, unset: bool = False) -> list[list[float]]:
    """OpenRLHF's credit; `unset`: ``--adv.terminal-reward`` unset and a scalar reward with a length penalty."""
    adv = dataclasses.replace(adv, terminal_reward=None) if unset else adv
    cfg = BackendConfig(n_samples_per_prompt=4, sero=sero, advantage=estimator, adv=adv, sero_opts=SeroOptions())
    records = []
    for i, traj in enumerate(_trajs()):  # the executor's record: the same steps, each with its token span
        turns = tuple(Turn(10 + 4 * t, 12 + 4 * t) for t in range(len(traj.steps)))
        rec = RolloutRecord(RolloutSpec("g0", i), traj.initial_observation, traj.initial_info, traj.steps, turns,
                            truncated=GROUP[i][4])  # fmt: skip
        assert rec.success == traj.success
        records.append(rec)
    if sero:
        for o, c in zip(_outcomes(), CONTINUATIONS, strict=True):
            i, t = o.root.trajectory, o.root.t
            spans = [(100 + 4 * j, 102 + 4 * j) for j in range(len(o.steps))]
            records[i] = oracle_record(cfg, records[i], t, o, spans, list(c[3]))
    scalar = [10.0 * r.success - (0.05 * len(r.turns) if unset else 0.0) for r in records]
    rows = [SampleRow(i, scalar[i], RolloutRecord.from_dict(r.to_dict())) for i, r in enumerate(records)]
    got = compute_turn_advantages(rows, cfg)
    out = []
    for row, a in zip(rows, got.per_turn, strict=True):
        assert row.record is not None
        out.append([float(x) for x, tr in zip(a, row.record.turns, strict=True) if not tr.oracle])
    return out


CASES = [
    ("gigpo", ADV, False, False),
    ("gigpo", AdvantageOptions(**{**vars(ADV), "norm": "mean", "state_key": "observation"}), False, False),
    ("graphgpo", ADV, False, False),
    ("graphgpo", AdvantageOptions(**{**vars(ADV), "state_key": "observation"}), False, False),
    ("graphgpo", ADV, True, False),
    ("gigpo", AdvantageOptions(**{**vars(ADV), "norm": "mean"}), False, True),
    ("graphgpo", ADV, False, True),
    ("graphgpo", ADV, True, True),
]


@pytest.mark.parametrize(("estimator", "adv", "sero", "unset"), CASES, ids=["gigpo", "gigpo_mean_obs", "graphgpo",
                         "graphgpo_obs", "graphgpo_sero", "gigpo_mean_unset", "graphgpo_unset", "graphgpo_sero_unset"])  # fmt: skip
def test_failed_and_truncated_groups_get_the_same_credit_in_every_backend(estimator, adv, sero, unset):
    local, pipe = _local(estimator, adv, sero), _pipeline(estimator, adv, sero)
    rl = _openrlhf(estimator, adv, sero, unset)
    assert local == pipe, f"local {local}\npipeline {pipe}"
    for i, turns in enumerate(rl):  # OpenRLHF trains a rescued rollout's turns before its root
        assert turns == local[i][: len(turns)], f"row {i}: openrlhf {turns} local {local[i]}"
    assert sum(len(t) for t in rl) == (11 if sero else 12)
