"""``envkit/ALFWorld-v0``: ALFWorld text games on the real TextWorld/PDDL engine, with native snapshots.

Usage::

    import gymnasium, envkit
    env = gymnasium.make("envkit/ALFWorld-v0")              # reads $ALFWORLD_DATA (alfworld-download's layout)
    obs, info = env.reset(seed=0)                            # a game drawn by the seed
    obs, info = env.reset(seed=0, options={"game": 3})       # or game index 3 of the split
    obs, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])
    s = env.snapshot(); ...; obs, info = env.restore(s)      # exact, ~1 ms, in the same instance

Constructor arguments (all optional): see `ALFWorldConfig`. Reset options: ``game`` (index into the split's
sorted game list), ``task_id`` (the game's path relative to the data dir, ``info["task_id"]``), ``task_type``
(draw only among games of that type). Without them the game is drawn from the env's generator (the seed).

Observations: after reset, the engine's intro (room and ``Your task is to: ...``); after a step, the task line
followed by the engine's feedback (``task_in_observation=False`` gives the bare feedback). Invalid commands
(anything not admissible, compared after stripping spaces) get the engine's ``Nothing happens.`` and
``info["invalid"] = True``. Reward 1.0 when the game is won (the episode terminates); the step limit truncates.

``info`` keys: ``admissible_actions``, ``won``, ``success``, ``invalid``, ``task_id``, ``task_type``,
``gamefile``, ``task`` (the task description), ``feedback`` (engine text of the last step), ``step``,
``state_key`` (the exact state: a digest of the game and its PDDL facts, `Engine.state_key`; docs/alfworld.md).

Snapshots are native: fast-downward's state id plus copies of the Python-side engine state and of the env's
counters and history. They are valid in the instance that took them (``SnapshotCapability.scope == "instance"``), also
after a pickle round trip through another process (e.g. a pool worker's snapshot sent to the trainer and
back: the env keeps the last ``live_snapshots`` engine states); restoring one elsewhere (another instance or
process) resets and replays the recorded actions with hash checks (`SnapshotEnvBase.restore_by_replay`),
which needs an episode reset with a seed.
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, SupportsFloat

from envkit.capability import SnapshotCapability
from envkit.envs.alfworld.data import SPLITS, Game, find_games, task_type_name
from envkit.envs.alfworld.engine import Engine, EngineState, load_assets
from envkit.errors import SnapshotError
from envkit.snapshot import Snapshot, SnapshotEnvBase

#: After this many engine steps in one game load, the next reset reloads the task (bounds the state registry).
_RELOAD_AFTER_STEPS = 100_000


@dataclass(frozen=True)
class ALFWorldConfig:
    """Options of `ALFWorldEnv`.

    Attributes:
        split: ``train``, ``valid_seen`` or ``valid_unseen``.
        task_types: Only these task types (names or alfworld ids 1-6); None for all six.
        max_steps: Step limit of an episode (truncation).
        data_dir: ALFWorld data dir; None for ``$ALFWORLD_DATA`` (else ``~/.cache/alfworld``).
        cache_dir: Where built game files go; None for ``$ENVKIT_CACHE/alfworld`` or ``~/.cache/envkit/alfworld``.
        task_in_observation: Prefix every step observation with ``Your task is to: ...``.
        asset_cache_size: Games whose parsed logic and SAS translation stay cached in the process.
        live_snapshots: Recent snapshots whose engine state the env keeps for native restore after a pickle
            round trip in the same process (older ones restore by replay; `discard` frees one at once).
    """

    split: str = "train"
    task_types: tuple[str, ...] | None = None
    max_steps: int = 50
    data_dir: str | None = None
    cache_dir: str | None = None
    task_in_observation: bool = True
    asset_cache_size: int = 64
    live_snapshots: int = 256

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.asset_cache_size < 1:
            raise ValueError(f"asset_cache_size must be >= 1, got {self.asset_cache_size}")
        if self.live_snapshots < 0:
            raise ValueError(f"live_snapshots must be >= 0, got {self.live_snapshots}")


@dataclass(frozen=True)
class _Frame:
    """The env-side state: which game, counters, history and the last (obs, info)."""

    game: int
    t: int
    intro: str
    history: tuple[tuple[str, str], ...]
    obs: str
    info: Mapping[str, Any]


class _Payload:
    """Snapshot payload: the env frame, the engine state, and a handle that survives pickling.

    Pickling drops the engine state (its state ids mean nothing elsewhere) but keeps `handle`: when the pickle
    comes back to the process and env instance that took the snapshot (e.g. a snapshot sent from a pool worker
    to the trainer and back), the env finds the engine state in its registry of recent snapshots and restores
    natively; anywhere else it replays.
    """

    __slots__ = ("engine", "frame", "handle")

    def __init__(self, frame: _Frame, engine: EngineState | None, handle: tuple[int, int, int]) -> None:
        self.frame = frame
        self.engine = engine
        self.handle = handle  # (pid, env instance id, snapshot number)

    def __getstate__(self) -> dict[str, Any]:
        return {"frame": self.frame, "engine": None, "handle": self.handle}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.frame, self.engine, self.handle = state["frame"], state["engine"], state["handle"]


_ENV_IDS = itertools.count(1)


class ALFWorldEnv(SnapshotEnvBase):
    """See the module docstring."""

    metadata: dict[str, Any] = {
        "render_modes": [],
        **SnapshotCapability(
            scope="instance",
            holds_resources=True,
            note=(
                "native restore is exact and sub-millisecond in the env instance that took the snapshot (while it "
                "has not loaded another game), also after a pickle round trip through another process (the "
                "instance keeps the last live_snapshots engine states); elsewhere (fresh instance, other process) "
                "restore replays the recorded actions with hash checks, which needs an episode reset with a seed"
            ),
        ).metadata(),
    }

    reset_options = frozenset({"game", "task_id", "task_type"})
    settings_not_state = frozenset({"cache_dir", "asset_cache_size", "live_snapshots"})

    def __init__(
        self,
        split: str = "train",
        task_types: tuple[str | int, ...] | list[str | int] | None = None,
        max_steps: int = 50,
        data_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        task_in_observation: bool = True,
        asset_cache_size: int = 64,
        live_snapshots: int = 256,
        evaluation: bool = False,
    ) -> None:
        super().__init__(evaluation=evaluation)
        self.config = ALFWorldConfig(
            split=split,
            task_types=None if task_types is None else tuple(task_type_name(t) for t in task_types),
            max_steps=int(max_steps),
            data_dir=None if data_dir is None else str(data_dir),
            cache_dir=None if cache_dir is None else str(cache_dir),
            task_in_observation=bool(task_in_observation),
            asset_cache_size=int(asset_cache_size),
            live_snapshots=int(live_snapshots),
        )
        self.games: tuple[Game, ...] = find_games(
            self.config.data_dir, self.config.split, self.config.task_types, self.config.cache_dir
        )
        self._by_id = {g.rel: i for i, g in enumerate(self.games)}
        self._engine = Engine()
        self._frame: _Frame | None = None
        self._steps_since_load = 0
        self._uid = next(_ENV_IDS)
        self._snap_no = 0
        self._live: OrderedDict[tuple[int, int, int], EngineState] = OrderedDict()

    # ----- helpers -----------------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The live TextWorld engine (privileged: oracles read its PDDL facts)."""
        return self._engine

    @property
    def game(self) -> Game:
        """The current game."""
        if self._frame is None:
            raise SnapshotError("no game yet: call env.reset() first")
        return self.games[self._frame.game]

    @property
    def intro(self) -> str:
        """The episode's first observation (room description and task)."""
        return "" if self._frame is None else self._frame.intro

    @property
    def history(self) -> tuple[tuple[str, str], ...]:
        """``(action, feedback)`` pairs of this episode so far (for prompt builders)."""
        return () if self._frame is None else self._frame.history

    def _pick(self, options: Mapping[str, Any]) -> int:
        if "game" in options:
            i = int(options["game"])
            if not 0 <= i < len(self.games):
                raise ValueError(f"option game={i} is out of range: this split has {len(self.games)} games (0..)")
            return i
        if "task_id" in options:
            tid = str(options["task_id"])
            if tid not in self._by_id:
                raise ValueError(f"option task_id={tid!r} is not a game of this env; see env.unwrapped.games")
            return self._by_id[tid]
        pool = list(range(len(self.games)))
        if options.get("task_type") is not None:
            tt = task_type_name(options["task_type"])
            pool = [i for i in pool if self.games[i].task_type == tt]
            if not pool:
                raise ValueError(f"option task_type={tt!r}: no game of that type in this env's games")
        return pool[int(self.np_random.integers(len(pool)))]

    def _info(self, game: int, state: Any, invalid: bool, t: int) -> dict[str, Any]:
        g = self.games[game]
        return {
            "admissible_actions": list(state["admissible_commands"]),
            "won": bool(state["won"]),
            "success": bool(state["won"]),
            "invalid": invalid,
            "task_id": g.rel,
            "task_type": g.task_type,
            "gamefile": str(self._engine.assets.key if self._engine.assets else ""),
            "task": self._task,
            "feedback": str(state.feedback),
            "step": t,
            "state_key": self._engine.state_key(g.rel),
        }

    # ----- SnapshotEnvBase -------------------------------------------------------------------------------
    def _reset(self, *, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        i = self._pick(options)
        assets = load_assets(
            self.games[i].gamefile(), self._engine, self.config.asset_cache_size, self.games[i].cache_dir / "assets"
        )
        if self._steps_since_load > _RELOAD_AFTER_STEPS:
            self._engine._loaded = None  # force a fresh SAS load (a new, empty state registry)
        gen = self._engine.generation
        self._engine.open(assets)
        state = self._engine.reset()
        if self._engine.generation != gen:
            self._steps_since_load = 0
        obs = str(state.feedback)
        self._task = obs.split("Your task is to: ", 1)[-1].strip() if "Your task is to: " in obs else ""
        info = self._info(i, state, False, 0)
        self._frame = _Frame(i, 0, obs, (), obs, info)
        return obs, dict(info)

    def _step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        f = self._frame
        assert f is not None
        command = action.strip()
        invalid = command not in f.info["admissible_actions"]
        state, _, _ = self._engine.step(command)
        self._steps_since_load += 1
        t = f.t + 1
        feedback = str(state.feedback)
        obs = f"Your task is to: {self._task}\n\n{feedback}" if self.config.task_in_observation else feedback
        info = self._info(f.game, state, invalid, t)
        won = info["won"]
        self._frame = _Frame(f.game, t, f.intro, (*f.history, (action, feedback)), obs, info)
        return obs, float(won), won, (not won and t >= self.config.max_steps), dict(info)

    def _snapshot(self) -> Any:
        assert self._frame is not None
        engine = self._engine.capture_state()
        self._snap_no += 1
        handle = (os.getpid(), self._uid, self._snap_no)
        self._live[handle] = engine
        while len(self._live) > self.config.live_snapshots:
            self._live.popitem(last=False)
        return _Payload(self._frame, engine, handle)

    def _discard(self, payload: Any) -> None:
        if isinstance(payload, _Payload):
            self._live.pop(payload.handle, None)

    def _restore(self, payload: Any, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        if not isinstance(payload, _Payload):
            raise SnapshotError(f"not an ALFWorld snapshot payload: {type(payload).__name__}")
        f = payload.frame
        engine = payload.engine if payload.engine is not None else self._live.get(payload.handle)
        if engine is not None and self._engine.can_load(engine):
            self._live[payload.handle] = engine
            self._live.move_to_end(payload.handle)
            self._engine.load_state(engine)
            self._frame = f
            self._task = str(f.info["task"])
            return f.obs, dict(f.info)
        obs, info = self.restore_by_replay(snapshot)
        return obs, info

    def close(self) -> None:
        self._engine.close()
        super().close()
