"""The contract between envkit's rollout side and its experience maker, as plain values.

- `RolloutSpec`: the plan of ONE rollout, made by the samples generator (group, phase, EDEN noise, XRPO ICL
  prefix, temperature) and executed by the rollout actor.
- `Turn` and `RolloutRecord`: what the agent executor observed (per-turn anchor states, rewards, invalid flags,
  token spans, SERO weights), attached to the response dict under `RESPONSE_KEY`.

They cross Ray as dicts (`to_dict` / `from_dict`) inside OpenRLHF's response dicts, then ride in
``Experience.info[INFO_KEY]`` as a list with one dict per sample, and the experience maker pops that key before
OpenRLHF sees the experiences (its logger turns every info list into a tensor).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

#: Key of the record in the response dict an agent executor returns.
RESPONSE_KEY = "envkit"
#: Key of the per-sample record list in ``Experience.info`` (popped by the experience maker).
INFO_KEY = "_envkit"


@dataclass(frozen=True)
class RolloutSpec:
    """Plan of one rollout.

    Attributes:
        group: Id of the rollout's task group within the step (unique per dispatched prompt).
        index: Rollout index within the group.
        phase: XRPO phase that scheduled it (1 for every other explorer).
        temperature: Sampling temperature (None: the run's ``--rollout.temperature``).
        noisy: EDEN noisy rollout: one perturbed embedding row is appended after the prompt for generation.
        anchor: Token id of the EDEN anchor (shared by the group's noisy rollouts), -1 when not noisy.
        rho: EDEN noise scale.
        seed: Seed of the noise draw.
        prefix: XRPO ICL prefix prepended to the prompt text ("" for none); the loss sees the same prompt.
        fork: A fork slot of branching rollouts (``--explorer branch``): not played from reset, but by the
            group's branch step from a restored backbone state (`envkit.trainers.openrlhf.branch_rows`).
    """

    group: str
    index: int = 0
    phase: int = 1
    temperature: float | None = None
    noisy: bool = False
    anchor: int = -1
    rho: float = 0.0
    seed: int = 0
    prefix: str = ""
    fork: bool = False

    def __post_init__(self) -> None:
        if self.noisy and self.anchor < 0:
            raise ValueError("a noisy RolloutSpec needs the anchor's token id (anchor >= 0)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutSpec:
        return cls(**data)


@dataclass(frozen=True)
class Turn:
    """One policy (or oracle) turn.

    Attributes:
        state: Anchor state: the raw observation the action answered (no history), hashed exactly by GiGPO.
        action: The action text sent to the env.
        reward: The env's reward for the step.
        invalid: The env flagged the action invalid.
        start: First token of the action in the rollout's observation tokens.
        end: One past the last token of the action.
        weight: Loss weight of the turn (SERO reachability weight; 1 for policy turns). The experience maker
            recomputes oracle turns' weights with the credit (`envkit.credit.sero_advantages`): equal numbers.
        next_state: Observation after the action (None after the last step of a failed episode).
        anchors: The state's digest anchors (`envkit.credit.state_keys`: ``graphgpo-recipe``, and ``env`` when
            the env gave ``info["state_key"]``; the observation anchor is `state`); None: only the observation
            is known.
        next_anchors: The same for the state after the action.
        oracle: A SERO oracle action (not sampled from the policy).
        loglik: Oracle turns: the policy's mean token log-prob of the action (l_j of the reachability weight).
    """

    state: str
    action: str
    reward: float
    invalid: bool
    start: int
    end: int
    weight: float = 1.0
    next_state: str | None = None
    anchors: dict[str, str] | None = None
    next_anchors: dict[str, str] | None = None
    oracle: bool = False
    loglik: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RolloutRecord:
    """What one rollout produced, beyond OpenRLHF's tokens and scalar reward.

    Attributes:
        spec: The plan it executed.
        turns: The turns, in order.
        success: The env reported success at the end.
        episode_return: Sum of the env's rewards.
        truncated: The episode was cut (context budget, ``max_turns``, or the env's step limit).
        reason: Why it ended: "terminated", "env_truncated", "max_turns", "context", "generation_length".
        oracle: A SERO oracle row: the failed rollout's tokens up to the root (its policy turns, trained with
            their own policy credit, weight 1), then the oracle's turns (``Turn.oracle``). ``success`` and
            ``episode_return`` stay the policy episode's; ``extra["root_t"]`` is the root step and
            ``extra["rescue_return"]`` the env return of prefix + oracle steps.
        policy_suffix: Oracle rows: the failed rollout's own turns from the root on. They are credited with the
            group (its policy episode stays whole in the baseline) but have no tokens in the row: they leave the
            loss (the row replaced the rollout to keep OpenRLHF's batch size).
        mean_logprob: Mean token log-prob of the policy's actions under the rollout policy (XRPO novelty),
            None when the engine returned no log-probs.
    """

    spec: RolloutSpec
    turns: tuple[Turn, ...] = ()
    success: bool = False
    episode_return: float = 0.0
    truncated: bool = False
    reason: str = "terminated"
    oracle: bool = False
    mean_logprob: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    policy_suffix: tuple[Turn, ...] = ()

    def policy_turns(self) -> tuple[Turn, ...]:
        """The turns of the policy episode the record holds: its own turns (oracle ones left out) + the suffix."""
        return tuple(t for t in self.turns if not t.oracle) + self.policy_suffix

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_dict(),
            "turns": [t.to_dict() for t in self.turns],
            "success": self.success,
            "episode_return": self.episode_return,
            "truncated": self.truncated,
            "reason": self.reason,
            "oracle": self.oracle,
            "mean_logprob": self.mean_logprob,
            "extra": dict(self.extra),
            "policy_suffix": [t.to_dict() for t in self.policy_suffix],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutRecord:
        return cls(
            spec=RolloutSpec.from_dict(data["spec"]),
            turns=tuple(Turn(**t) for t in data.get("turns", ())),
            success=bool(data.get("success", False)),
            episode_return=float(data.get("episode_return", 0.0)),
            truncated=bool(data.get("truncated", False)),
            reason=str(data.get("reason", "terminated")),
            oracle=bool(data.get("oracle", False)),
            mean_logprob=data.get("mean_logprob"),
            extra=dict(data.get("extra", {})),
            policy_suffix=tuple(Turn(**t) for t in data.get("policy_suffix", ())),
        )
