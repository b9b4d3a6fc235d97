"""`check_snapshot_env`: the six rules of the snapshot contract as an executable check.

Run it on any env that claims snapshots::

    from envkit import check_snapshot_env, make
    report = check_snapshot_env(make("envkit/WebShop-v0"))
    print(report)

It raises `SnapshotContractError` naming the rule that broke and what differed.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from envkit.capability import SNAPSHOT_KINDS, capability_from_metadata
from envkit.core import jsonable
from envkit.errors import EnvkitError, SnapshotContractError, SnapshotError
from envkit.snapshot import observation_hash

ActionChooser = Callable[[Any, Mapping[str, Any], np.random.Generator], Any]


def admissible_or_sample(env: gym.Env[Any, Any]) -> ActionChooser:
    """Choose uniformly among ``info["admissible_actions"]`` when the env lists them, else sample the space."""

    def choose(obs: Any, info: Mapping[str, Any], rng: np.random.Generator) -> Any:
        acts = info.get("admissible_actions")
        if acts:
            return acts[int(rng.integers(len(acts)))]
        env.action_space.seed(int(rng.integers(2**31 - 1)))
        return env.action_space.sample()

    return choose


@dataclass(frozen=True)
class CheckReport:
    """Which rules were checked and how (``rules[n]`` describes the check of rule n)."""

    env: str
    kind: str
    rules: Mapping[int, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"snapshot contract: {self.env} ({self.kind}) passed"]
        lines += [f"  rule {k}: {v}" for k, v in sorted(self.rules.items())]
        return "\n".join(lines)


def _transition_key(t: tuple[Any, Any, bool, bool, Mapping[str, Any]], compare_info: bool, ignore: set[str]) -> Any:
    obs, reward, term, trunc, info = t
    key: tuple[Any, ...] = (observation_hash(obs), float(reward), bool(term), bool(trunc))
    if compare_info:
        key += (observation_hash(repr(sorted((k, v) for k, v in jsonable(info).items() if k not in ignore))),)
    return key


def _describe(i: int, a: Any, b: Any) -> str:
    return f"transition {i} differs: first {a!r:.300} vs now {b!r:.300}"


@dataclass
class Probe:
    """What the rules share: the env, how actions are chosen, and the reference run around one snapshot.

    `reference_run` fills it: reset(seed), `prefix` played, snapshot `snap` taken (its pickle in `held` when the
    capability says snapshots pickle), `suffix` played with transition keys `ref`. Each rule function takes a
    filled probe, so a test can run one rule on its own (``rule_6_discard_releases(reference_run(env))``).
    """

    env: Any
    choose: ActionChooser
    rng: np.random.Generator
    compare_info: bool
    ignore: set[str]
    picklable: bool
    seed: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)
    prefix: list[Any] = field(default_factory=list)
    suffix: list[Any] = field(default_factory=list)
    ref: list[Any] = field(default_factory=list)
    snap: Any = None
    held: bytes | None = None
    held_obs: str = ""
    rng_before: Any = None  # the env's RNG state just before and just after snapshot()
    rng_after: Any = None
    restored: tuple[Any, Mapping[str, Any]] | None = None

    def play(
        self, n: int, obs: Any, info: Mapping[str, Any], acts: list[Any] | None = None
    ) -> tuple[list[Any], list[Any], Any, Mapping[str, Any]]:
        """Play n chosen actions (or exactly `acts`); return (actions, transition keys, last obs, last info)."""
        taken: list[Any] = []
        keys: list[Any] = []
        for i in range(n if acts is None else len(acts)):
            a = self.choose(obs, info, self.rng) if acts is None else acts[i]
            t = self.env.step(a)
            taken.append(a)
            keys.append(_transition_key(t, self.compare_info, self.ignore))
            obs, info = t[0], t[4]
            if t[2] or t[3]:
                break
        return taken, keys, obs, info

    def replay(self, acts: list[Any]) -> list[Any]:
        """Transition keys of exactly `acts` from the env's current state."""
        return self.play(0, None, {}, acts)[1]


def declared_kind(env: Any) -> str:
    """Rule 5, the declaration: ``metadata["snapshot"]`` is a known kind, the capability parses, and snapshot /
    restore / discard are callable on what the caller holds. Returns the kind."""
    base = env.unwrapped
    meta: Mapping[str, Any] = getattr(env, "metadata", None) or base.metadata
    kind = meta.get("snapshot")
    if kind not in SNAPSHOT_KINDS:
        raise SnapshotContractError(
            f"rule 5: metadata['snapshot'] must be one of {SNAPSHOT_KINDS}, got {kind!r}; declare the capability"
        )
    try:
        capability_from_metadata(meta)
    except SnapshotError as exc:
        raise SnapshotContractError(f"rule 5: {exc}") from exc
    for name in ("snapshot", "restore", "discard"):
        if not callable(getattr(env, name, None)):
            raise SnapshotContractError(
                f"rule 5: {type(env).__name__} has no {name}() method; gymnasium wrappers hide it: build the env "
                "without wrappers (envkit registers its ids without them) or call the check on env.unwrapped"
            )
    return str(kind)


def reference_run(
    env: Any,
    *,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    depth: int | None = None,
    horizon: int = 4,
    choose: ActionChooser | None = None,
    compare_info: bool = True,
) -> Probe:
    """Play `depth` actions from ``reset(seed, options)`` (trying later seeds until the prefix does not end the
    episode), snapshot, play `horizon` more: the run every rule compares against (see `check_snapshot_env`)."""
    declared_kind(env)
    meta: Mapping[str, Any] = getattr(env, "metadata", None) or env.unwrapped.metadata
    cap = capability_from_metadata(meta)
    probe = Probe(
        env=env,
        choose=choose or admissible_or_sample(env),
        rng=np.random.default_rng(seed),
        compare_info=compare_info,
        ignore=set(cap.info_ignore),
        picklable=cap.picklable,
        options=dict(options or {}),
    )
    depth = cap.check_depth if depth is None else depth
    for s in range(seed, seed + 20):
        obs, info = env.reset(seed=s, options=dict(probe.options))
        prefix, keys, obs, info = probe.play(depth, obs, info)
        if len(prefix) == depth and not (keys and (keys[-1][2] or keys[-1][3])):
            probe.seed, probe.prefix = s, prefix
            break
    else:
        raise SnapshotContractError(f"the check needs episodes of > {depth} steps; lower depth= or pass other options")
    probe.held_obs = observation_hash(obs)
    probe.rng_before = _rng_state(env.unwrapped)
    probe.snap = env.snapshot()
    probe.rng_after = _rng_state(env.unwrapped)
    probe.held = pickle.dumps(probe.snap) if cap.picklable else None
    probe.suffix, probe.ref, _, _ = probe.play(horizon, obs, info)
    return probe


def rule_1_snapshot_changes_nothing(p: Probe) -> str:
    """snapshot() leaves the RNG and every later transition as they would have been without it."""
    if p.rng_after != p.rng_before:
        raise SnapshotContractError("rule 1: snapshot() advanced the env's random generator")
    p.env.reset(seed=p.seed, options=dict(p.options))
    p.replay(p.prefix)
    again = p.replay(p.suffix)
    if again != p.ref:
        raise SnapshotContractError("rule 1: taking a snapshot changed later transitions; " + _first_diff(p.ref, again))
    return f"snapshot() left the RNG and {len(p.ref)} later transitions unchanged"


def rule_2_restore_returns_the_held_state(p: Probe) -> str:
    """restore(s) returns the observation held at s; the same actions then give the same transitions."""
    r_obs, r_info = p.env.restore(p.snap)
    p.restored = (r_obs, r_info)
    if observation_hash(r_obs) != p.held_obs:
        raise SnapshotContractError("rule 2: restore(s) returned an observation different from the one held at s")
    after = p.replay(p.suffix)
    if after != p.ref:
        raise SnapshotContractError(
            "rule 2: after restore, the same actions gave different transitions; " + _first_diff(p.ref, after)
        )
    return "restore(s) returned the held observation and reproduced the transitions"


def rule_3_snapshots_are_isolated(p: Probe, make_fresh: Callable[[], gym.Env[Any, Any]] | None = None) -> str:
    """Stepping never mutates s; s restores twice; a fresh instance restores it (through pickle where it pickles)."""
    if p.held is not None and pickle.dumps(p.snap) != p.held:
        raise SnapshotContractError("rule 3: stepping after restore mutated the snapshot object")
    r_obs, _ = p.env.restore(p.snap)
    twice = p.replay(p.suffix)
    if twice != p.ref:
        raise SnapshotContractError(
            "rule 3: a second restore of the same snapshot diverged; " + _first_diff(p.ref, twice)
        )
    fresh: Any = (make_fresh or _default_fresh(p.env))()
    try:
        s2 = pickle.loads(p.held) if p.held is not None else p.snap
        f_obs, _ = fresh.restore(s2)
        if observation_hash(f_obs) != observation_hash(r_obs):
            raise SnapshotContractError("rule 3: restoring into a fresh env instance gave a different observation")
        ft = [_transition_key(fresh.step(a), p.compare_info, p.ignore) for a in p.suffix]
        if ft != p.ref:
            raise SnapshotContractError(
                "rule 3: a fresh env instance diverged after restore; " + _first_diff(p.ref, ft)
            )
    finally:
        fresh.close()
    return "snapshot unchanged by stepping, restored twice, and restored into a fresh instance" + (
        " (via pickle)" if p.held is not None else ""
    )


def rule_4_counters_are_state(p: Probe, max_steps: int = 500) -> str:
    """Step counters and histories are state: played to the episode's end twice from s, it ends the same way."""
    r_obs, r_info = p.env.restore(p.snap)
    long_acts, long_ref, _, _ = p.play(max_steps, r_obs, r_info)
    p.env.restore(p.snap)
    long_again = p.replay(long_acts)
    if long_again != long_ref or not (long_ref and (long_ref[-1][2] or long_ref[-1][3])):
        raise SnapshotContractError(
            "rule 4: the episode did not end the same way after a restore (step counters or histories are not part "
            "of the snapshot, or the env has no step limit); " + _first_diff(long_ref, long_again)
        )
    return f"played to the episode's end ({len(long_ref)} steps) twice from s: same end, same step" + (
        "; info compared on every transition" if p.compare_info else ""
    )


def rule_5_foreign_snapshots_are_refused(p: Probe) -> str:
    """The capability is declared (`declared_kind`) and restore() of a foreign object raises a clear error."""
    kind = declared_kind(p.env)
    try:
        p.env.restore(object())
    except (EnvkitError, TypeError, ValueError):
        pass
    else:
        raise SnapshotContractError("rule 5: restore(object()) did not raise a clear error")
    return f"metadata['snapshot'] == {kind!r}; restore(object()) raised a clear error"


def rule_6_discard_releases(p: Probe) -> str:
    """discard(s) releases s, and a later restore(s) raises SnapshotError."""
    p.env.discard(p.snap)
    try:
        p.env.restore(p.snap)
    except SnapshotError:
        pass
    else:
        raise SnapshotContractError("rule 6: restore() of a discarded snapshot did not raise SnapshotError")
    return "discard(s) released the snapshot and a later restore(s) raised SnapshotError"


def check_snapshot_env(
    env: Any,
    *,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    depth: int | None = None,
    horizon: int = 4,
    choose: ActionChooser | None = None,
    make_fresh: Callable[[], gym.Env[Any, Any]] | None = None,
    compare_info: bool = True,
    max_steps: int = 500,
) -> CheckReport:
    """Check the snapshot contract (envkit/snapshot.py, README "Snapshots") on `env`: rules 1-6, in order.

    Plays `depth` actions from ``reset(seed, options)``, snapshots, plays `horizon` more (`reference_run`), then
    runs ``rule_1_...`` to ``rule_6_...`` on that run; each is a function of its own a test can call.

    Args:
        env: The env (as returned by `gymnasium.make` or constructed directly).
        seed: Seed of the episode used for the check.
        options: Reset options.
        depth: Actions before the snapshot (default: the env's ``SnapshotCapability.check_depth``, e.g. 0 for
            single-turn envs, else 3).
        horizon: Actions after it (the episode may end earlier).
        choose: Picks actions; default: uniform over ``info["admissible_actions"]`` else ``action_space.sample()``.
        make_fresh: Builds a fresh instance for rule 3; default ``gymnasium.make(env.spec)`` or ``type(env)()``.
        compare_info: Also compare the JSON-able info (minus the capability's ``info_ignore`` keys).
        max_steps: Rule 4 plays from the snapshot to the episode's end; it must end within this many steps.

    Returns:
        A `CheckReport` describing each check.

    Raises:
        SnapshotContractError: a rule is broken; the message names it.
    """
    kind = declared_kind(env)
    p = reference_run(
        env, seed=seed, options=options, depth=depth, horizon=horizon, choose=choose, compare_info=compare_info
    )
    rules = {
        1: rule_1_snapshot_changes_nothing(p),
        2: rule_2_restore_returns_the_held_state(p),
        3: rule_3_snapshots_are_isolated(p, make_fresh),
        4: rule_4_counters_are_state(p, max_steps),
        5: rule_5_foreign_snapshots_are_refused(p),
        6: rule_6_discard_releases(p),
    }
    return CheckReport(env=str(getattr(env.spec, "id", type(env.unwrapped).__name__)), kind=kind, rules=rules)


def _rng_state(base: Any) -> Any:
    gen = getattr(base, "_np_random", None)
    return None if gen is None else repr(gen.bit_generator.state)


def _first_diff(a: list[Any], b: list[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return _describe(i, x, y)
    return f"lengths differ: {len(a)} vs {len(b)} transitions"


def _default_fresh(env: gym.Env[Any, Any]) -> Callable[[], gym.Env[Any, Any]]:
    if env.spec is not None:
        spec = env.spec
        return lambda: gym.make(spec)
    cls = type(env.unwrapped)
    # envkit envs keep the arguments they were built with (`SnapshotEnvBase`): a fresh one gets the same settings
    args, kwargs = getattr(env.unwrapped, "init_args", ((), {}))
    return lambda: cls(*args, **kwargs)
