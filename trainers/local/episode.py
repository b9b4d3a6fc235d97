"""`Episode`: one multi-turn episode of the local trainer, its tokens and tags around its one record of steps.

The env steps (observations, actions, rewards, terminated / truncated, infos, and the snapshot before each step)
live in ONE place, the episode's `envkit.recorder.EpisodeRecorder` (``Episode.recorder``), fed by
`envkit.trainers.local.multi_turn.play_specs` as it plays. `Episode` keeps only what the recorder does not: the
token ids (prompt, growing context, loss flags, the turn of each token, sampling log-probs) and the trainer's tags
(group, index, ICL / noisy first turn, truncation counters, a lost env; which episodes enter the loss is the
explorer's `envkit.trainers.local.contracts.EpisodeCredit`, not a tag). Everything about steps
is read through the recorder: `steps`, `actions`, `rewards`, `invalid` (``info["invalid"]`` of each step),
`observations` / `infos` (each state's, the final one included) and `success` (the env's verdict on the last
step's info, `envkit.core.env_success`).

A fork of a branching rollout (`envkit.trainers.local.explorers.branch.fork`) starts mid-episode: it names its
backbone (`parent`) and the turn it forks at; the steps it shares with the backbone (its `prefix`) are read from
the backbone's record, and its own recorder starts at the restored state: `steps` is the prefix, then its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from envkit.core import Step, Trajectory, env_success
from envkit.recorder import EpisodeRecorder

__all__ = ["Episode"]


@dataclass
class Episode:
    """One multi-turn episode: its tokens and tags; its steps are read from `recorder` (module docstring).

    Attributes:
        group: Task group (index of the step's task).
        index: Episode index within its group.
        env: The env instance it was played in (its snapshots are discarded there).
        prompt_ids: The first prompt's token ids.
        context: Prompt ids, then each turn's sampled action ids and the ids of the text that follows.
        flags: Per token of ``context[len(prompt_ids):]``: 1 for a sampled action token (in the loss), else 0.
        turn_of_token: Per token of ``context[len(prompt_ids):]``: the turn whose action it is, -1 otherwise.
        recorder: The one record of its own env steps (None only for an episode whose env was lost before it
            began).
        parent: A fork's backbone, whose first `fork_turn` steps are this episode's `prefix` (None: from reset).
        fork_turn: The turn a fork starts at (0 without a parent).
    """

    group: int
    index: int
    env: gym.Env[str, str]
    prompt_ids: list[int]
    context: list[int]
    flags: list[int]
    turn_of_token: list[int]
    recorder: EpisodeRecorder | None = None
    parent: Episode | None = field(default=None, repr=False)
    fork_turn: int = 0
    done: bool = False
    context_truncated: bool = False
    action_truncated: int = 0
    seed: int | None = None
    icl: bool = False  # XRPO: the first prompt carries ICL demonstrations
    noisy: bool = False  # EDEN: the first turn had a perturbed extra input position
    loss_prompt_ids: list[int] | None = None  # the prompt the loss sees, when not `prompt_ids` (XRPO clean)
    logprobs: list[float] = field(default_factory=list)  # sampling log-probs of the action tokens, when recorded
    lost: str = ""  # why the episode lost its env mid-way (a fleet actor or node lost): dropped from the update
    retries: int = 0  # earlier tries of this episode that were lost (``agent.retries``)

    @classmethod
    def from_steps(
        cls, group: int, index: int, observation: str, info: Mapping[str, Any], steps: Iterable[Step], **tags: Any
    ) -> Episode:
        """An episode whose record is `steps` from the start state (`observation`, `info`), fed through an
        `EpisodeRecorder` as `play_specs` feeds it (no snapshots); `tags`: its other fields (``seed``,
        ``noisy``, ``logprobs``, ...). For tests and for scripts that replay another backend's log
        (``scripts/openrlhf_credit_check.py``). Invalid flags and success are read from the steps' infos
        (``info["invalid"]``, ``info["success"]``), as for a played episode.
        """
        rec = EpisodeRecorder(observation, info, snapshots=False)
        for s in steps:
            rec.step(None, s.action, s.next_observation, s.reward, s.terminated, s.truncated, s.info)
        rec.stop()
        tags.setdefault("done", True)
        return cls(group, index, tags.pop("env", None), [1], [1], [], [], rec, **tags)

    # ----- steps, read from the record -------------------------------------------------------------------------
    @property
    def prefix(self) -> tuple[Step, ...]:
        """A fork's steps shared with its backbone (read from the backbone's record; empty from reset)."""
        return self.parent.steps[: self.fork_turn] if self.parent is not None else ()

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every env step of the episode: a fork's `prefix`, then the recorder's (each with the snapshot before it
        when played with ``record=True``)."""
        own = self.recorder.steps if self.recorder is not None else ()
        return self.prefix + own if self.parent is not None else own

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(s.action for s in self.steps)

    @property
    def rewards(self) -> tuple[float, ...]:
        return tuple(s.reward for s in self.steps)

    @property
    def invalid(self) -> tuple[bool, ...]:
        """Whether the env flagged each step's action invalid (``info["invalid"]``)."""
        return tuple(bool(s.info.get("invalid", False)) for s in self.steps)

    @property
    def turns(self) -> int:
        """The number of env steps (actions) taken, a fork's prefix included."""
        own = len(self.recorder) if self.recorder is not None else 0
        return (min(self.fork_turn, self.parent.turns) if self.parent is not None else 0) + own

    @property
    def initial_observation(self) -> str:
        """The observation the episode starts from (reset's; a fork's: its backbone's)."""
        if self.parent is not None:
            return self.parent.initial_observation
        return self.recorder.initial_observation if self.recorder is not None else ""

    @property
    def initial_info(self) -> dict[str, Any]:
        """The JSON-able info where the episode starts (the reset's; a fork's: its backbone's)."""
        if self.parent is not None:
            return self.parent.initial_info
        return self.recorder.initial_info if self.recorder is not None else {}

    @property
    def observations(self) -> tuple[str, ...]:
        """Every state's observation: the one before each action, then the one after the last action (empty for
        an episode whose env was lost before it began)."""
        if self.recorder is None and self.parent is None:
            return ()
        return (self.initial_observation, *(s.next_observation for s in self.steps))

    @property
    def infos(self) -> tuple[dict[str, Any], ...]:
        """Every state's JSON-able info, aligned with `observations`."""
        if self.recorder is None and self.parent is None:
            return ()
        return (self.initial_info, *(dict(s.info) for s in self.steps))

    @property
    def success(self) -> bool:
        """The env's verdict on the episode's last own step (`envkit.core.env_success`); False without one."""
        own = self.recorder.steps if self.recorder is not None else ()
        return bool(own) and env_success(own[-1].info)

    # ----- tokens ----------------------------------------------------------------------------------------------
    @property
    def train_prompt_ids(self) -> list[int]:
        """The prompt of this episode's training row (`prompt_ids` unless XRPO trains ICL rows on the plain one)."""
        return self.prompt_ids if self.loss_prompt_ids is None else self.loss_prompt_ids

    def action_start(self, t: int) -> int:
        """Index in `context` of turn t's first action token (len(context) when turn t was never played)."""
        after = next((i for i, k in enumerate(self.turn_of_token) if k == t), len(self.turn_of_token))
        return len(self.prompt_ids) + after

    def action_ids(self, t: int) -> list[int]:
        """The token ids sampled as turn t's action."""
        return [tok for tok, k in zip(self.context[len(self.prompt_ids) :], self.turn_of_token, strict=True) if k == t]

    # ----- snapshots and the trajectory ------------------------------------------------------------------------
    @property
    def final_snapshot(self) -> Any:
        """The final state's snapshot (`envkit.recorder`'s rule: only when the trainer cut the episode)."""
        return self.recorder.final_snapshot if self.recorder is not None else None

    def snapshots(self) -> list[Any]:
        """Every snapshot this episode took (before each own step, and of its final state), for discarding; a
        fork's prefix took none of its own."""
        return self.recorder.snapshots() if self.recorder is not None else []

    def trajectory(self, env_id: str) -> Trajectory:
        """The episode as an `envkit.core.Trajectory` (snapshots only with ``record=True`` in `play`).

        Raises:
            ValueError: the episode has no recorder (it was not played by `play_specs`), or it is a fork.
        """
        if self.recorder is None or self.parent is not None:
            raise ValueError(f"episode {self.group}/{self.index} has no trajectory from reset: play it with play_specs")
        return self.recorder.trajectory(env_id=env_id, task_id=str(self.seed), seed=self.seed, success=self.success)
