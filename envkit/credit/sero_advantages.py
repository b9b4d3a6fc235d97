"""SERO's credit: GraphGPO advantages of a group's policy rows and of its oracle rescues (docs/methods.md, SERO).

One function for every backend (the local trainer, ``envkit-oracle rollout``, the OpenRLHF experience maker):

    sero_advantages(policy: StepTable, rescues: Sequence[Rescue], adv: AdvantageOptions, sero: SeroOptions)
        -> SeroAdvantages

``policy`` is EXACTLY the table the backend gives plain GraphGPO (`turn_credit(policy, "graphgpo", adv)`),
``rescues`` the successful oracle continuations with the policy's log-likelihood ``l_j`` of each oracle action.
The design (docs/methods.md gives the reasons):

- **Policy rows, episode level**: ``A_E`` is plain GraphGPO's, over the policy episodes only. Oracle successes are
  not samples of the policy; they never enter its episode baseline.
- **Policy rows, step level**: the distances come from the graph with the oracle transitions added (the policy's
  earlier states on a rescued episode get finite distances); ``A_G`` normalises ``R_G`` over the same-state
  *policy* rows only (``sero.same_state="policy"``, default), so an oracle action re-ranks the policy's own action
  at a state only through the distances it reveals, never as an extra baseline sample (``"all"``: oracle rows
  join the same-state statistics unweighted, as the earlier code did). A same-state group whose policy rows'
  distances did not change (or were all equal before and are all equal after: ``A_G`` depends only on the invalid
  flags then) keeps plain GraphGPO's values bit for bit.
- **Oracle rows**: ``A_E`` is a success's episode advantage in the statistics of the policy episodes plus the
  rescues (bounded: a singleton policy baseline of an all-fail group would divide by 0); ``A_G`` over all same-state
  rows (policy and oracle); ``A = beta_g * A_G + beta_e * A_E``, then multiplied by the weight
  (`envkit.credit.reachability.ReachConfig.weights`: the reachability weight, and the first oracle action's own
  likelihood with ``reach.first="own"``, the ablation; the paper's weight 1 under the default ``"one"``).
- **States** are the policy table's own nodes, whatever state key built it (`envkit.credit.state_keys`: the
  observation, the env's exact key, the graphgpo-recipe anchor); `Rescue.from_path` names a rescue's states with
  the same key, following the path from reset through its root, so same-state rows and graph nodes agree.
- A rescue rooted at an episode's final state reveals that state: the episode's last row points there instead of
  plain GraphGPO's unknown terminal node, so the action that reached the root gets its distance.

Example:
    >>> from envkit.credit.step_table import StepTable
    >>> table = StepTable(group=[0, 0], trajectory=[0, 1], step=[0, 0], state=["s", "s"], reward=[0.0, 0.0],
    ...                   next_state=["x", "y"], action=["a", "b"])
    >>> res = sero_advantages(table, [Rescue(0, 1, 1, ("y",), ("fix",), ("win",), (False,), (-0.5,), 10.0)])
    >>> res.policy.advantages.round(4).tolist(), res.plain.advantages.tolist()
    ([-0.7071, 0.7071], [0.0, 0.0])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.advantages import GraphgpoResult, group_normalize
from envkit.credit.graph import SUCCESS_NODE, TERMINAL_NODE
from envkit.credit.sero import SeroOptions
from envkit.credit.state_keys import StateKeyKind
from envkit.credit.step_table import StepRows, StepTable, steps_anchors
from envkit.credit.turn_credit import turn_credit

__all__ = ["OracleCredit", "PolicyCredit", "Rescue", "SeroAdvantages", "sero_advantages"]

#: Trajectory id of rescue k in the augmented table (cannot collide with a policy trajectory id).
RESCUE_ID = "\x00<rescue>"


@dataclass(frozen=True)
class Rescue:
    """One successful oracle continuation as the credit reads it.

    Attributes:
        group: Its policy group's id (``StepTable.group``).
        trajectory: Id of the policy trajectory it branched from (``StepTable.trajectory``).
        t: Root step: the root is the state of that trajectory's row ``t`` (``t`` = its length: its final state).
        states: (K,) state before each oracle action (``states[0]`` is the root's).
        actions: (K,) oracle actions.
        next_states: (K,) observation after each (the last one's is ignored: it points to SUCCESS).
        invalid: (K,) the env flagged the action invalid.
        loglik: (K,) the policy's length-normalised log-likelihood ``l_j`` of each oracle action (no gradient).
        episode_return: Return of the rescued episode (``adv.terminal_reward``, or the env rewards of the policy's
            prefix plus the oracle's steps where the run sets none).
    """

    group: Hashable
    trajectory: Hashable
    t: int
    states: tuple[str, ...]
    actions: tuple[str, ...]
    next_states: tuple[str, ...]
    invalid: tuple[bool, ...]
    loglik: tuple[float, ...]
    episode_return: float

    def __post_init__(self) -> None:
        k = len(self.actions)
        if k == 0:
            raise ValueError("a Rescue needs at least one oracle step (a continuation with no step rescued nothing)")
        for name in ("states", "next_states", "invalid", "loglik"):
            if len(getattr(self, name)) != k:
                raise ValueError(f"Rescue.{name} has {len(getattr(self, name))} entries for {k} oracle actions")
        if self.t < 0:
            raise ValueError(f"Rescue.t must be >= 0 (a step of the policy trajectory), got {self.t}")
        if not np.all(np.isfinite(self.loglik)) or max(self.loglik) > 1e-6:
            raise ValueError(f"Rescue.loglik must be finite log-likelihoods <= 0, got {self.loglik}")

    @property
    def root(self) -> str:
        return self.states[0]

    @classmethod
    def from_steps(
        cls,
        steps: Sequence[Any],
        *,
        group: Hashable,
        trajectory: Hashable,
        t: int,
        loglik: Sequence[float],
        episode_return: float,
    ) -> Rescue:
        """From `envkit.core.Step`s (``observation``, ``action``, ``next_observation``, ``info["invalid"]``)."""
        return cls(
            group, trajectory, int(t),
            tuple(str(s.observation) for s in steps), tuple(str(s.action) for s in steps),
            tuple(str(s.next_observation) for s in steps),
            tuple(bool((s.info or {}).get("invalid", False)) for s in steps),
            tuple(float(v) for v in loglik), float(episode_return),
        )  # fmt: skip

    @classmethod
    def from_path(
        cls,
        kind: StateKeyKind,
        start: tuple[str, Mapping[str, Any]],
        prefix: Sequence[Any],
        steps: Sequence[Any],
        *,
        group: Hashable,
        trajectory: Hashable,
        t: int,
        loglik: Sequence[float],
        episode_return: float,
    ) -> Rescue:
        """`from_steps` with each state named by its anchor under state key `kind` (`envkit.credit.state_keys`,
        the key the policy table was built with): the anchors follow the path from reset (``start`` = its
        observation and info) through the policy's `prefix` (its `t` steps before the root) and the oracle's
        `steps`. ``kind="observation"`` is exactly `from_steps` (`start` and `prefix` unused).

        Raises:
            ValueError: another kind, and `prefix` does not hold the `t` steps before the root.
        """
        r = cls.from_steps(steps, group=group, trajectory=trajectory, t=t, loglik=loglik, episode_return=episode_return)
        if kind == "observation":
            return r
        if len(prefix) != t:
            raise ValueError(
                f"Rescue.from_path with state key {kind!r} needs the {t} policy steps before the root, got "
                f"{len(prefix)} (record the episode's steps, or use state key 'observation')"
            )
        nodes = steps_anchors(kind, start[0], start[1], (*prefix, *steps))[t:]
        return dataclasses.replace(r, states=tuple(nodes[:-1]), next_states=tuple(nodes[1:]))


@dataclass(frozen=True, eq=False)
class PolicyCredit:
    """Credit of the policy rows, (N,) arrays aligned with the policy table's rows.

    Attributes:
        advantages: ``beta_g * A_G + beta_e * A_E`` (weight 1).
        graph_adv: ``A_G`` with the rescued graph's distances.
        episode: ``A_E``: plain GraphGPO's, over the policy episodes only.
        step_reward: ``R_G`` with the rescued graph's distances.
        distance: d(s') in the rescued graph.
        distance_before: d(s') in the policy-only graph (plain GraphGPO's).
        changed: The row's ``A_G`` was recomputed (its same-state group saw a distance change, or an oracle
            sibling with ``same_state="all"``); False rows equal plain GraphGPO exactly.
    """

    advantages: np.ndarray
    graph_adv: np.ndarray
    episode: np.ndarray
    step_reward: np.ndarray
    distance: np.ndarray
    distance_before: np.ndarray
    changed: np.ndarray


@dataclass(frozen=True, eq=False)
class OracleCredit:
    """Credit of the oracle rows, (M,) arrays over every rescue's steps in order (rescue 0's steps first).

    Attributes:
        rescue: Index of the row's rescue.
        step: Index of the oracle step within its rescue.
        advantages: ``beta_g * A_G + beta_e * A_E`` before the weight.
        weights: Reachability weight (`ReachConfig.weights` of the rescue's ``loglik``).
        weighted: ``advantages * weights``: what the loss uses.
        graph_adv, episode, step_reward, distance: as for `PolicyCredit`.
    """

    rescue: np.ndarray
    step: np.ndarray
    advantages: np.ndarray
    weights: np.ndarray
    weighted: np.ndarray
    graph_adv: np.ndarray
    episode: np.ndarray
    step_reward: np.ndarray
    distance: np.ndarray

    def of(self, k: int) -> slice:
        """The rows of rescue k."""
        idx = np.flatnonzero(self.rescue == k)
        return slice(int(idx[0]), int(idx[-1]) + 1) if len(idx) else slice(0, 0)


@dataclass(frozen=True, eq=False)
class SeroAdvantages:
    """Result of `sero_advantages`.

    Attributes:
        policy: The policy rows' credit.
        oracle: The oracle rows' credit.
        plain: Plain GraphGPO on the policy table (what a run without SERO computes).
        rescues: The rescues, in order.
        w_min: The weight floor used (for the diagnostics).
    """

    policy: PolicyCredit
    oracle: OracleCredit
    plain: GraphgpoResult
    rescues: tuple[Rescue, ...]
    w_min: float

    def metrics(self) -> dict[str, float]:
        """SERO diagnostics (docs/methods.md, SERO: what every run logs), as floats.

        ``sero_rescues`` successful continuations; ``sero_oracle_actions`` oracle rows; ``sero_w_min_share``
        share of oracle actions whose weight sits at ``w_min``; ``sero_first_loglik`` mean l_j of the first oracle
        action; ``sero_policy_mass`` / ``sero_oracle_mass`` sum of the policy rows' advantages and of the oracle
        rows' weighted advantages; ``sero_policy_mass_plain`` the policy rows' sum under plain GraphGPO;
        ``sero_policy_changed`` policy rows whose advantage differs from plain GraphGPO.
        """
        o = self.oracle
        first = [r.loglik[0] for r in self.rescues]
        return {
            "sero_rescues": float(len(self.rescues)),
            "sero_oracle_actions": float(len(o.weights)),
            "sero_w_min_share": float(np.mean(o.weights <= self.w_min + 1e-12)) if len(o.weights) else 0.0,
            "sero_first_loglik": float(np.mean(first)) if first else 0.0,
            "sero_policy_mass": float(self.policy.advantages.sum()),
            "sero_policy_mass_plain": float(self.plain.advantages.sum()),
            "sero_oracle_mass": float(o.weighted.sum()),
            "sero_policy_changed": float(np.sum(self.policy.advantages != self.plain.advantages)),
        }


def _rescued_table(policy: StepTable, rescues: Sequence[Rescue]) -> StepTable:
    """Policy rows (next nodes made explicit; a rescue from a final state reveals it) then the oracle rows."""
    nxt = policy.next_nodes()
    index = {(g, tr, int(s)): i for i, (g, tr, s) in enumerate(zip(policy.group, policy.trajectory, policy.step))}
    lengths: dict[tuple[Hashable, Hashable], int] = {}
    for g, tr in zip(policy.group.tolist(), policy.trajectory.tolist()):
        lengths[(g, tr)] = lengths.get((g, tr), 0) + 1
    for k, r in enumerate(rescues):
        n = lengths.get((r.group, r.trajectory))
        if n is None:
            raise ValueError(f"rescue {k} names policy trajectory {r.trajectory!r} of group {r.group!r}: no such rows")
        if r.t > n:
            raise ValueError(f"rescue {k} is rooted at step {r.t} of a trajectory with {n} steps (t <= length)")
        if r.t < n:
            state = policy.state[index[(r.group, r.trajectory, r.t)]]
            if state != r.root:
                raise ValueError(f"rescue {k}'s root {r.root!r} is not the state of its policy row ({state!r})")
            continue
        last = index[(r.group, r.trajectory, n - 1)]
        if nxt[last] == SUCCESS_NODE:
            raise ValueError(f"rescue {k} is rooted on a successful trajectory: roots lie on failed ones")
        if nxt[last] not in (TERMINAL_NODE, r.root):
            raise ValueError(f"rescue {k}'s root {r.root!r} is not its trajectory's final state ({nxt[last]!r})")
        nxt[last] = r.root  # the final observation, unknown to plain GraphGPO, is the root the oracle continued
    rows = StepRows()
    for i in range(len(policy)):
        rows.add(
            group=policy.group[i], trajectory=policy.trajectory[i], step=int(policy.step[i]), state=policy.state[i],
            reward=float(policy.reward[i]), invalid=bool(policy.invalid[i]),
            next_state=nxt[i] if nxt[i] != SUCCESS_NODE else TERMINAL_NODE, action=policy.action[i],
            episode_return=float(policy.episode_return[i]), success=bool(policy.success[i]),
        )  # fmt: skip
    for k, r in enumerate(rescues):
        for j in range(len(r.actions)):
            rows.add(
                group=r.group, trajectory=(RESCUE_ID, k), step=r.t + j, state=r.states[j], reward=0.0,
                invalid=r.invalid[j], next_state=r.next_states[j], action=r.actions[j],
                episode_return=r.episode_return, success=True,
            )  # fmt: skip
    return rows.table()


def sero_advantages(
    policy: StepTable,
    rescues: Sequence[Rescue],
    adv: AdvantageOptions | None = None,
    sero: SeroOptions | None = None,
) -> SeroAdvantages:
    """GraphGPO credit of policy rows and oracle rescues (see the module docstring for the design).

    Args:
        policy: The policy rows, exactly as the backend passes them to plain GraphGPO (any number of groups).
        rescues: Successful oracle continuations (groups and trajectories of ``policy``).
        adv: Advantage options (``graphgpo_kwargs()``: gamma_g, beta_g, beta_e, reward_scale, episode_stats, norm,
            invalid_penalty, eps), the same object plain GraphGPO gets. Default `AdvantageOptions()`.
        sero: SERO options (``same_state``, ``reach``). Default `SeroOptions()`.

    Returns:
        `SeroAdvantages`; with no rescue, ``policy`` equals ``plain`` exactly.
    """
    adv = adv or AdvantageOptions()
    sero = sero or SeroOptions()
    plain = turn_credit(policy, "graphgpo", adv)
    n = len(policy)
    rescues = tuple(rescues)
    aug = turn_credit(_rescued_table(policy, rescues), "graphgpo", adv)
    is_policy = np.zeros(len(aug.distance), dtype=bool)
    is_policy[:n] = True
    anchor = _anchor_codes(policy, rescues)
    if sero.same_state == "policy":
        ga_all = group_normalize(aug.step_reward, anchor, norm=adv.norm, eps=adv.eps, stats_mask=is_policy)
    else:
        ga_all = aug.graph_adv
    d0, d1 = plain.distance, aug.distance[:n]
    with_oracle = set(anchor[n:].tolist()) if sero.same_state == "all" else set()
    changed = np.zeros(n, dtype=bool)
    for code in np.unique(anchor[:n]):
        rows = np.flatnonzero(anchor[:n] == code)
        same = np.array_equal(d0[rows], d1[rows]) or (len(set(d0[rows])) == 1 and len(set(d1[rows])) == 1)
        changed[rows] = not same or int(code) in with_oracle
    graph_adv = np.where(changed, ga_all[:n], plain.graph_adv)
    advantages = np.where(changed, adv.beta_g * graph_adv + adv.beta_e * plain.episode, plain.advantages)
    pol = PolicyCredit(advantages, graph_adv, plain.episode.copy(), aug.step_reward[:n], d1.copy(), d0.copy(), changed)
    weights = [sero.reach.weights(np.asarray(r.loglik, dtype=np.float64)) for r in rescues]
    o_adv = adv.beta_g * aug.graph_adv[n:] + adv.beta_e * aug.episode[n:]
    w = np.concatenate(weights) if weights else np.zeros(0)
    ora = OracleCredit(
        rescue=np.concatenate([np.full(len(r.actions), k) for k, r in enumerate(rescues)] or [np.zeros(0, int)]),
        step=np.concatenate([np.arange(len(r.actions)) for r in rescues] or [np.zeros(0, int)]),
        advantages=o_adv, weights=w, weighted=o_adv * w, graph_adv=aug.graph_adv[n:].copy(),
        episode=aug.episode[n:].copy(), step_reward=aug.step_reward[n:].copy(), distance=aug.distance[n:].copy(),
    )  # fmt: skip
    return SeroAdvantages(pol, ora, plain, rescues, sero.reach.w_min)


def _anchor_codes(policy: StepTable, rescues: Sequence[Rescue]) -> np.ndarray:
    """Same-state group code of every augmented row: (group id, state), policy rows first."""
    keys = list(zip(policy.group.tolist(), policy.state.tolist()))
    keys += [(r.group, s) for r in rescues for s in r.states]
    table: dict[Any, int] = {}
    return np.fromiter((table.setdefault(k, len(table)) for k in keys), dtype=np.int64, count=len(keys))
