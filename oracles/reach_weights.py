"""SERO's reachability weights of oracle steps from a policy scorer (METHODS.md section 4, step 5).

`reach_weights` asks a policy `envkit.oracles.scorers.Scorer` for ``l_j`` of each oracle action (its length-normalised
log-likelihood, or with ``weighting="choice"`` (``--sero.weighting``) the log-probability of choosing it among the
admissible actions), then applies `envkit.credit.reachability.reachability_weights` (floor, temperature,
minimum). `oracle_turns` is the policy's view of each oracle step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from envkit.core import Step
from envkit.credit.reachability import choice_logprob
from envkit.credit.sero import SeroConfig
from envkit.oracles.continuation import ContinuationOutcome
from envkit.oracles.scorers import Scorer
from envkit.policies import PolicyInput

__all__ = ["Weighted", "oracle_turns", "reach_weights"]


@dataclass(frozen=True)
class Weighted:
    """Reachability weights of one continuation.

    Attributes:
        loglik: l_j of each oracle action (the value the weight formula used).
        weights: w_k of each oracle step (the first is 1).
        choice_fallbacks: Steps where the choice variant fell back to the sequence variant (the oracle's action
            was not among the admissible actions).
    """

    loglik: tuple[float, ...]
    weights: tuple[float, ...]
    choice_fallbacks: int = 0


def oracle_turns(prefix: Sequence[Step], outcome: ContinuationOutcome, task_id: str) -> list[PolicyInput]:
    """The policy's view of each oracle step: observation, info before the action, history so far."""
    history = [
        s
        if s.snapshot is None
        else Step(
            s.observation, s.action, s.reward, s.next_observation, s.terminated, s.truncated, s.info, None, s.is_oracle
        )
        for s in prefix
    ]
    turns = []
    info = outcome.root_info
    for st in outcome.steps:
        turns.append(PolicyInput(st.observation, info, tuple(history), task_id))
        history.append(st)
        info = st.info
    return turns


def reach_weights(
    scorer: Scorer,
    prefix: Sequence[Step],
    outcome: ContinuationOutcome,
    config: SeroConfig,
    task_id: str = "",
    *,
    weighting: Literal["sequence", "choice"],
) -> Weighted:
    """l_j from the scorer, then `envkit.credit.reachability.reachability_weights` (METHODS section 4, step 5).

    ``weighting`` is the run's ``--sero.weighting`` (`envkit.oracles.run_config.OracleSeroOptions`).
    """
    if not outcome.steps:
        return Weighted((), ())
    turns = oracle_turns(prefix, outcome, task_id)
    actions = [s.action for s in outcome.steps]
    fallbacks = 0
    if weighting == "sequence":
        ll = scorer.loglik(turns, actions)
    else:
        ll = []
        need: list[int] = []
        for j, (x, a) in enumerate(zip(turns, actions, strict=True)):
            cands = [str(c) for c in x.info.get("admissible_actions") or []]
            if a in cands:
                ll.append(choice_logprob(scorer.sequence_logprobs(x, cands), cands.index(a)))
            else:
                ll.append(0.0)
                need.append(j)
        if need:
            fallbacks = len(need)
            seq = scorer.loglik([turns[j] for j in need], [actions[j] for j in need])
            for j, v in zip(need, seq, strict=True):
                ll[j] = v
    w = config.reach.weights(np.asarray(ll, dtype=np.float64))
    return Weighted(tuple(float(v) for v in ll), tuple(float(v) for v in w), fallbacks)
