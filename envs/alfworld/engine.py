"""The ALFWorld text engine (TextWorld's `PddlEnv` on fast-downward) with native state capture.

`Engine` subclasses `textworld.envs.pddl.PddlEnv`, the real engine of the ``alfworld``/``textworld`` packages,
without changing what it computes: `reset` reuses the SAS task loaded in this instance's own copy of
libdownward (only the state id moves back to the initial state; per-game data comes from
`envkit.envs.alfworld.assets`), `step` is the engine's own step (an invalid command skips recomputing the unchanged
admissible commands), and `capture_state`/`load_state` save and restore the complete state: fast-downward's
current state id (read and set through ``ctypes``), the Python-side fact sets of `PddlState`, the current and
previous `GameState`, the last action and the move counter. A captured state is valid in the same `Engine`
while it keeps the same game loaded (`Engine.generation` tells), because state ids index libdownward's state
registry of that load.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envkit.credit.state_keys import digest
from envkit.envs.alfworld.assets import FactSets, GameAssets, blank_state, load_assets
from envkit.envs.alfworld.deps import GameState, PddlEnv, fast_downward, textworld

__all__ = ["Engine", "EngineState", "GameAssets", "load_assets"]


_ENGINE_IDS = itertools.count(1)


# ----- the engine --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineState:
    """A complete engine state, valid in the `Engine` (and `generation`) that captured it."""

    engine: int
    generation: int
    state_id: int
    facts: FactSets
    operators: Mapping[int, Any]
    state: GameState
    prev_state: GameState | None
    last_action: Any
    moves: int


_FREE_LIBS: list[Any] = []
_LIBS_LOCK = threading.Lock()


def _acquire_lib() -> Any:
    """A private copy of libdownward: a released one if any, else a new copy (``fast_downward.load_lib``)."""
    with _LIBS_LOCK:
        if _FREE_LIBS:
            return _FREE_LIBS.pop()
    return fast_downward.load_lib()


def _release_lib(lib: Any) -> None:
    lib.cleanup()
    with _LIBS_LOCK:
        _FREE_LIBS.append(lib)


class Engine(PddlEnv):  # type: ignore[misc]
    """TextWorld's PDDL engine with cached per-game assets and exact capture/load of its state.

    Each engine needs its own copy of libdownward (its task and state registry are globals of the library).
    Copies are never unloaded: they share C++ "unique" symbols, so ``dlclose`` of one crashes the others at
    exit. `close` (or garbage collection) returns the copy to a process-wide pool that the next engine reuses,
    so creating and closing envs repeatedly does not grow memory.
    """

    def __init__(self) -> None:
        textworld.Environment.__init__(self, textworld.EnvInfos(won=True, admissible_commands=True, moves=True))
        self.downward_lib = _acquire_lib()
        self._finalizer = weakref.finalize(self, _release_lib, self.downward_lib)
        self.downward_lib.get_state_id.argtypes = []
        self.downward_lib.get_state_id.restype = int
        self.downward_lib.set_state_id.argtypes = [ctypes.c_int]
        self.downward_lib.set_state_id.restype = None
        self.assets: GameAssets | None = None
        self.generation = 0
        self._loaded: str | None = None
        self._initial_id = 0
        self._closed = False
        self.uid = next(_ENGINE_IDS)

    def open(self, assets: GameAssets) -> None:
        """Select the game (takes effect at the next `reset`)."""
        self.assets = assets
        self._game_data, self._game_file, self.walkthrough = assets.data, assets.key, None
        self._logic = assets.logic
        self._entity_infos = assets.entity_infos

    def reset(self) -> GameState:
        a = self.assets
        if a is None:
            raise RuntimeError("Engine.reset() before Engine.open(assets)")
        lib = self.downward_lib
        st = blank_state(lib, a.logic, a.data["pddl_problem"], a.task, a.sas, a.sas_replan, a.name2type)
        if self._loaded != a.key:
            lib.load_sas(a.sas.encode("utf-8"))
            lib.load_sas_replan(a.sas_replan.encode("utf-8"))
            self._loaded, self._initial_id = a.key, lib.get_state_id()
            self.generation += 1
        else:
            lib.set_state_id(self._initial_id)
        a.initial.into(st)
        self._pddl_state = st
        self.prev_state = None
        self.state = GameState()
        self._last_action = None
        self._moves = 0
        context = {"state": st, "facts": list(st.facts), "variables": {}, "mapping": {}, "entity_infos": a.entity_infos}
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        return self.state

    def step(self, command: str) -> tuple[GameState, int, bool]:
        command = command.strip()
        prev = self.state
        if command in prev["_valid_commands"]:
            return super().step(command)  # type: ignore[no-any-return]
        # Invalid: the engine says "Nothing happens." and the state is unchanged; reuse the computed infos.
        self.prev_state = prev
        self.state = GameState(prev)
        self.state.last_command = command
        self.state.feedback = self.state.raw = "Nothing happens."
        self._last_action = None
        self.state["_last_action"] = None
        self.state["last_action"] = None
        self.state["score"] = 1 if self.state["won"] else 0
        self.state["done"] = self.state["won"] or self.state["lost"]
        return self.state, self.state["score"], self.state["done"]

    def capture_state(self) -> EngineState:
        """The complete current state (cheap: fact sets are copied, the immutable rest is shared)."""
        st = self._pddl_state
        return EngineState(
            self.uid,
            self.generation,
            int(self.downward_lib.get_state_id()),
            FactSets.of(st),
            dict(st._operators),
            GameState(self.state),
            None if self.prev_state is None else GameState(self.prev_state),
            self._last_action,
            self._moves,
        )

    def can_load(self, s: EngineState) -> bool:
        """Whether `s` was captured here, with the same game still loaded in libdownward."""
        return s.engine == self.uid and s.generation == self.generation and not self._closed

    def load_state(self, s: EngineState) -> None:
        """Return to state `s` (check `can_load` first)."""
        if not self.can_load(s):
            raise ValueError("this EngineState belongs to another engine or an earlier game load")
        self.downward_lib.set_state_id(s.state_id)
        st = self._pddl_state
        s.facts.into(st)
        st._operators = dict(s.operators)
        self.state = GameState(s.state)
        self.prev_state = None if s.prev_state is None else GameState(s.prev_state)
        self._last_action = s.last_action
        self._moves = s.moves

    def state_key(self, game: str) -> str:
        """The exact key of the current state (``info["state_key"]``): a digest of `game` (the game's id, e.g. its
        path relative to the data dir) and of the PDDL facts
        that differ from the game's initial facts (added and removed, as sorted text), so its cost grows with
        what the episode changed, not with the size of the game (the static facts are the game's).

        Two kinds of facts are left out, as neither is part of the state the dynamics read: ``checked`` (alfred.pddl
        only ever sets it, in look, inventory, examine, open and help; no precondition, goal or text template
        reads it) and TextWorld's Python-side ``not_*`` facts (a record of deleted facts, i.e. of history: leaving
        a place adds ``not_atlocation``). So ``look`` makes no new state, and returning to a place is the state
        it was before."""
        a = self.assets
        if a is None:
            raise RuntimeError("Engine.state_key() before Engine.open(assets)")
        now, then = self._pddl_state._facts, a.initial.facts
        added: list[str] = []
        removed: list[str] = []
        for sig in {*now, *then}:
            if sig.name == "checked" or sig.name.startswith("not_"):
                continue
            cur, init = now.get(sig) or frozenset(), then.get(sig) or frozenset()
            if cur != init:
                added += map(str, cur - init)
                removed += map(str, init - cur)
        return digest("alfworld", game, sorted(added), sorted(removed))

    @property
    def pddl_facts(self) -> Any:
        """The current PDDL facts (``textworld.logic.Proposition``s): what the planner and the oracle read."""
        return self._pddl_state.facts

    def readable_facts(self) -> list[Any]:
        """The current facts with entity names (what ``EnvInfos(facts=True)`` would put in every state)."""
        return [self._get_human_readable_fact(f) for f in self.state["_facts"]]

    def replan(self) -> list[str]:
        """fast-downward's plan from the current state, as commands (alfworld's planner expert)."""
        return list(self._pddl_state.replan(self._entity_infos))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()
