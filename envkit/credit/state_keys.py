"""State keys: what GiGPO's step groups and GraphGPO's graph nodes compare (docs/methods.md section 2, "State keys").

Three kinds (``AdvantageOptions.state_key``, ``--adv.state-key``):

- ``observation``: the raw observation text (GiGPO's paper; different states with the same text alias).
- ``env``: the env's exact key ``info["state_key"]`` (each env documents what it digests; equal for equal
  states, different otherwise).
- ``graphgpo-recipe``: the ALFWorld anchor of GraphGPO's published recipe, reproduced from its description:
  the observation, the agent's location, the held items with their heated / cooled / cleaned / sliced state
  (tracked from the action text), the history of moves and the sorted admissible commands; hashed.

API summary:
    STATE_KEY                                  the info field ("state_key")
    digest(*parts) -> str                      blake2b-128 hex of the parts' canonical JSON (what envs hash)
    resolve_state_key(kind, infos) -> kind     None -> "env" when every info has a key, else "observation"
    AnchorTracker(observation, info)           follows one episode; .step(action, observation, info); .anchor(kind)
    path_anchors(kind, observations, actions, infos) -> [anchor of s_0 .. s_T]

Example:
    >>> path_anchors("observation", ["a", "b"], ["go"], [{}, {}])
    ['a', 'b']
    >>> path_anchors("env", ["a", "a"], ["go"], [{"state_key": "k0"}, {"state_key": "k1"}])
    ['k0', 'k1']
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "STATE_KEY",
    "STATE_KEY_KINDS",
    "AnchorTracker",
    "StateKeyKind",
    "digest",
    "path_anchors",
    "resolve_state_key",
]

STATE_KEY = "state_key"
"""The info field in which an env offers its exact state key (a hex digest)."""

StateKeyKind = Literal["observation", "env", "graphgpo-recipe"]
STATE_KEY_KINDS: tuple[str, ...] = ("observation", "env", "graphgpo-recipe")


def digest(*parts: Any) -> str:
    """32 hex chars: blake2b-128 of the parts' JSON (sorted keys; tuples as lists). Stable across processes."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _check_kind(kind: str) -> None:
    if kind not in STATE_KEY_KINDS:
        raise ValueError(f"adv.state-key {kind!r}: choose one of {STATE_KEY_KINDS} (or leave it unset: env if offered)")


def resolve_state_key(kind: StateKeyKind | None, infos: Iterable[Mapping[str, Any]]) -> StateKeyKind:
    """The key a batch uses: `kind`, or for None ``"env"`` when every state's info has a str ``state_key`` (and
    there is at least one), else ``"observation"``.

    Raises:
        ValueError: `kind` is ``"env"`` but a state has no key (says which key to pick instead).
    """
    if kind is not None:
        _check_kind(kind)
        if kind != "env":
            return kind
    seen = False
    for info in infos:
        seen = True
        if not isinstance(info.get(STATE_KEY), str):
            if kind == "env":
                raise ValueError(
                    "adv.state-key='env' but a recorded state has no info['state_key'] (the env offers none, the "
                    "server strips it: envkit-serve --state-keys, or the records come from an older executor); set "
                    "adv.state-key=observation or graphgpo-recipe (--adv.state-key=observation on OpenRLHF, "
                    "--agent.adv.state-key locally)"
                )
            return "observation"
    return "env" if seen else "observation"


_HELD_STATES = {"heat": "heated", "cool": "cooled", "clean": "cleaned", "slice": "sliced"}
_TAKE = re.compile(r"^take (.+?) from (.+)$")
_PUT = re.compile(r"^(?:put|move) (.+?) (?:in/on|in|on|to) (.+)$")
_TREAT = re.compile(r"^(heat|cool|clean|slice) (.+?) with (.+)$")


def _failed(observation: str) -> bool:
    """ALFWorld's answer to an action that did nothing (an invalid or impossible command)."""
    return observation.rstrip().endswith("Nothing happens.")


class AnchorTracker:
    """Follows one episode and gives each state's anchor under every kind (see the module docstring).

    The recipe's parts come from the action text only: ``go to X`` moves the agent to X and appends X to the
    move history; ``take O from R`` adds O to the held items; ``put O in/on R`` (``move O to R``) removes it;
    ``heat|cool|clean O with R`` marks a held O heated / cooled / cleaned; ``slice O with K`` marks O sliced
    (held or not: its state is kept until O is held). An action whose observation ends in ``Nothing happens.``
    changes nothing.
    """

    def __init__(self, observation: str, info: Mapping[str, Any]) -> None:
        self.location = ""
        self.moves: list[str] = []
        self.held: dict[str, set[str]] = {}
        self._states: dict[str, set[str]] = {}
        self._observe(observation, info)

    def _observe(self, observation: str, info: Mapping[str, Any]) -> None:
        self.observation = str(observation)
        key = info.get(STATE_KEY)
        self.env_key = key if isinstance(key, str) else None
        self.admissible = sorted(str(a) for a in info.get("admissible_actions") or ())

    def step(self, action: str, observation: str, info: Mapping[str, Any]) -> None:
        """Account for `action` and move to the state it led to (its observation and info)."""
        a = " ".join(str(action).strip().lower().split())
        if not _failed(str(observation)):
            if a.startswith("go to "):
                self.location = a[len("go to ") :]
                self.moves.append(self.location)
            elif m := _TAKE.match(a):
                obj = m.group(1)
                self.held[obj] = self._states.setdefault(obj, set())
            elif m := _PUT.match(a):
                self.held.pop(m.group(1), None)
            elif m := _TREAT.match(a):
                self._states.setdefault(m.group(2), set()).add(_HELD_STATES[m.group(1)])
        self._observe(observation, info)

    def recipe_anchor(self) -> str:
        """The graphgpo-recipe anchor of the current state (a digest)."""
        held = sorted((obj, sorted(st)) for obj, st in self.held.items())
        return digest("graphgpo-recipe", self.observation, self.location, held, self.moves, self.admissible)

    def anchor(self, kind: StateKeyKind) -> str:
        """The current state's anchor under `kind` (``env`` raises when the env gave no key)."""
        if kind == "observation":
            return self.observation
        if kind == "env":
            if self.env_key is None:
                raise ValueError(
                    "adv.state-key='env' but this state's info has no 'state_key'; set adv.state-key=observation"
                )
            return self.env_key
        _check_kind(kind)
        return self.recipe_anchor()

    def anchors(self) -> dict[str, str]:
        """The current state's digest anchors: ``graphgpo-recipe``, and ``env`` when the env gave a key (the
        ``observation`` anchor is the observation itself, which records keep anyway)."""
        out = {"graphgpo-recipe": self.recipe_anchor()}
        if self.env_key is not None:
            out["env"] = self.env_key
        return out


def path_anchors(
    kind: StateKeyKind, observations: Sequence[str], actions: Sequence[str], infos: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The anchor of every state s_0..s_T of one path under `kind`.

    Args:
        kind: ``observation``, ``env`` or ``graphgpo-recipe``.
        observations: T + 1 observations (reset's, then each step's).
        actions: The T actions.
        infos: T + 1 infos aligned with `observations` (reset's, then each step's).
    """
    _check_kind(kind)
    if not (len(observations) == len(infos) == len(actions) + 1):
        raise ValueError(
            f"path_anchors needs T + 1 observations and infos for T actions, got {len(observations)}, "
            f"{len(infos)} and {len(actions)}"
        )
    if kind == "observation":
        return [str(o) for o in observations]
    tracker = AnchorTracker(observations[0], infos[0])
    out = [tracker.anchor(kind)]
    for a, o, i in zip(actions, observations[1:], infos[1:], strict=True):
        tracker.step(a, o, i)
        out.append(tracker.anchor(kind))
    return out
