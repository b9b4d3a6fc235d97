"""The contract between envkit's rollout side and its experience maker, as plain values.

- `RolloutSpec`: the plan of ONE rollout, made by the samples generator (group, phase, EDEN noise, XRPO ICL
  prefix, temperature) and executed by the rollout actor.
- `RolloutRecord`: what one rollout produced beyond OpenRLHF's tokens: its ONE record of env steps (the
  executor's `envkit.recorder.EpisodeRecorder` steps, `envkit.core.Step`: observations, actions, rewards, infos
  with the invalid flag and the env's verdict; the state before the first step and its info), and per step a
  `Turn` with only what the steps do not hold: the action's token span, its loss weight, the oracle flag and l_j.
  Success, the episode return, invalid flags and every state's anchors (`envkit.credit.state_keys`) are read
  from the steps, never stored twice.

They cross Ray as plain dicts (`to_dict` / `from_dict`; a step as `step_to_dict`, its snapshot never travels: it
stays with the executor's recorder) inside OpenRLHF's response dicts, then ride in
``Experience.info[INFO_KEY]`` as a list with one dict per sample, and the experience maker pops that key before
OpenRLHF sees the experiences (its logger turns every info list into a tensor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envkit.core import Step, env_success

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


def step_to_dict(step: Step) -> dict[str, Any]:
    """A step as a plain dict (its snapshot left out: snapshots never leave the process that took them)."""
    return {
        "observation": step.observation, "action": step.action, "reward": float(step.reward),
        "next_observation": step.next_observation, "terminated": bool(step.terminated),
        "truncated": bool(step.truncated), "info": dict(step.info), "is_oracle": bool(step.is_oracle),
    }  # fmt: skip


def step_from_dict(data: Mapping[str, Any]) -> Step:
    """The `Step` of `step_to_dict` (no snapshot).

    Raises:
        ValueError: a field is missing (the dict is not a step's wire form, e.g. a record of an older executor).
    """
    try:
        return Step(
            str(data["observation"]), str(data["action"]), float(data["reward"]), str(data["next_observation"]),
            bool(data["terminated"]), bool(data["truncated"]), dict(data.get("info") or {}),
            is_oracle=bool(data.get("is_oracle", False)),
        )  # fmt: skip
    except KeyError as exc:
        raise ValueError(
            f"a rollout record's step lacks {exc.args[0]!r} (keys: {sorted(data)}); records are written by "
            "envkit's agent executor (RolloutRecord.to_dict): regenerate them with this version"
        ) from exc


def _turn_from_dict(data: Mapping[str, Any]) -> Turn:
    try:
        return Turn(**data)
    except TypeError as exc:
        raise ValueError(
            f"a rollout record's turn has keys {sorted(data)}, expected those of Turn (start, end, weight, oracle, "
            "loglik): a record of an older executor, whose turns held the steps too; regenerate it with this version"
        ) from exc


@dataclass(frozen=True)
class Turn:
    """What the record keeps of one turn beside its step (`RolloutRecord.steps`, same position).

    Attributes:
        start: First token of the action in the rollout's observation tokens.
        end: One past the last token of the action.
        weight: Loss weight of the turn (SERO reachability weight; 1 for policy turns). The experience maker
            recomputes oracle turns' weights with the credit (`envkit.credit.sero_advantages`): equal numbers.
        oracle: A SERO oracle action (not sampled from the policy; its step has ``is_oracle``).
        loglik: Oracle turns: the policy's mean token log-prob of the action (l_j of the reachability weight).
    """

    start: int
    end: int
    weight: float = 1.0
    oracle: bool = False
    loglik: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RolloutRecord:
    """What one rollout produced, beyond OpenRLHF's tokens and scalar reward.

    Attributes:
        spec: The plan it executed.
        observation: The observation of the state the row's first step starts from (reset's; a fork's: its
            backbone's reset).
        info: That state's JSON-able info (anchors and the state key are read from it).
        steps: The row's env steps in order (`envkit.core.Step`, no snapshots): the one record of states,
            actions, rewards, infos (``invalid``, the verdict). A fork's: the backbone's steps before the fork
            turn, then its own; an oracle row's: the rollout's steps before the root, then the oracle's.
        turns: Per step, its `Turn` (token span, loss weight, oracle flag, l_j).
        truncated: The episode was cut (context budget, ``max_turns``, or the env's step limit).
        reason: Why it ended: "terminated", "env_truncated", "max_turns", "context", "generation_length".
        oracle: A SERO oracle row: the failed rollout's tokens up to the root (its policy turns, trained with
            their own policy credit, weight 1), then the oracle's turns (``Turn.oracle``). `success` and
            `episode_return` stay the policy episode's; ``extra["root_t"]`` is the root step (a rescue's
            return is ``terminal_reward``, resolved per run: `envkit.env_settings.resolve_env_settings`).
        policy_suffix: Oracle rows: the failed rollout's own steps from the root on. They are credited with the
            group (its policy episode stays whole in the baseline) but have no tokens in the row: they leave the
            loss (the row replaced the rollout to keep OpenRLHF's batch size).
        mean_logprob: Mean token log-prob of the policy's actions under the rollout policy (XRPO novelty),
            None when the engine returned no log-probs.
    """

    spec: RolloutSpec
    observation: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    turns: tuple[Turn, ...] = ()
    truncated: bool = False
    reason: str = "terminated"
    oracle: bool = False
    mean_logprob: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    policy_suffix: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if len(self.turns) != len(self.steps):
            raise ValueError(
                f"RolloutRecord of group {self.spec.group!r}: {len(self.steps)} steps but {len(self.turns)} turns; "
                "give one Turn (token span) per recorded step"
            )
        bad = [j for j, (s, t) in enumerate(zip(self.steps, self.turns)) if bool(s.is_oracle) != bool(t.oracle)]
        if bad:
            raise ValueError(
                f"RolloutRecord of group {self.spec.group!r}: turn {bad[0]}'s oracle flag differs from its step's "
                "is_oracle; an oracle turn's step is the oracle's (envkit.oracles.continuation marks it is_oracle)"
            )

    def policy_steps(self) -> tuple[Step, ...]:
        """The steps of the policy episode the record holds: its own steps (oracle ones left out) + the suffix."""
        return tuple(s for s, t in zip(self.steps, self.turns) if not t.oracle) + self.policy_suffix

    @property
    def success(self) -> bool:
        """The env's verdict on the policy episode's last step (`envkit.core.env_success`); False without one."""
        steps = self.policy_steps()
        return bool(steps) and env_success(steps[-1].info)

    @property
    def episode_return(self) -> float:
        """The sum of the policy episode's env rewards."""
        return float(sum(s.reward for s in self.policy_steps()))

    @property
    def invalid(self) -> tuple[bool, ...]:
        """Per step of `steps`, the env's invalid-action flag (``info["invalid"]``)."""
        return tuple(bool(s.info.get("invalid", False)) for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_dict(),
            "observation": self.observation,
            "info": dict(self.info),
            "steps": [step_to_dict(s) for s in self.steps],
            "turns": [t.to_dict() for t in self.turns],
            "truncated": self.truncated,
            "reason": self.reason,
            "oracle": self.oracle,
            "mean_logprob": self.mean_logprob,
            "extra": dict(self.extra),
            "policy_suffix": [step_to_dict(s) for s in self.policy_suffix],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutRecord:
        """The record of `to_dict`.

        Raises:
            ValueError: a step is not in its wire form, or steps and turns differ in number.
        """
        return cls(
            spec=RolloutSpec.from_dict(data["spec"]),
            observation=str(data.get("observation", "")),
            info=dict(data.get("info") or {}),
            steps=tuple(step_from_dict(s) for s in data.get("steps", ())),
            turns=tuple(_turn_from_dict(t) for t in data.get("turns", ())),
            truncated=bool(data.get("truncated", False)),
            reason=str(data.get("reason", "terminated")),
            oracle=bool(data.get("oracle", False)),
            mean_logprob=data.get("mean_logprob"),
            extra=dict(data.get("extra", {})),
            policy_suffix=tuple(step_from_dict(s) for s in data.get("policy_suffix", ())),
        )
