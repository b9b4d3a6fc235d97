"""The ALFWorld text engine (TextWorld's `PddlEnv` on fast-downward) with caches and native state capture.

This is the real engine of the ``alfworld``/``textworld`` packages, made fast and snapshot-capable without
changing what it computes:

- `GameAssets` holds everything derived from one game file that never changes during play: the parsed game
  logic (grammar), the PDDL-to-SAS translations (plain and planner-optimised), the entity names (ALFWorld's
  `Demangler`, unshuffled) and the initial fact sets. `load_assets` keeps them in a process-wide LRU cache,
  so a reset costs no re-translation (textworld re-translates twice per reset).
- `CachedGrammar` memoises the TatSu parses that TextWorld's grammar repeats for every admissible command on
  every step; derivations are identical, only faster.
- `Engine` subclasses `textworld.envs.pddl.PddlEnv`: `reset` reuses the SAS task loaded in this instance's
  own copy of libdownward (only the state id moves back to the initial state), `step` is the engine's own
  step (an invalid command skips recomputing the unchanged admissible commands), and `capture_state`/`load_state` save
  and restore the complete state: fast-downward's current state id (read and set through ``ctypes``), the
  Python-side fact sets of `PddlState`, the current and previous `GameState`, the last action and the move
  counter. A captured state is valid in the same `Engine` while it keeps the same game loaded
  (`Engine.generation` tells), because state ids index libdownward's state registry of that load.

Trap handled here: `fast_downward.pddl2sas` overwrites ``sys.argv`` on every call; `_translate` restores it.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import pickle
import sys
import tempfile
import threading
import weakref
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envkit.errors import require

_ALFWORLD_DATA = os.environ.get("ALFWORLD_DATA")
try:
    import fast_downward
    import textworld
    from alfworld.agents.utils.misc import Demangler
    from textworld.core import GameState
    from textworld.envs.pddl import PddlEnv, textgen
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.generator.game import EntityInfo
    from textworld.logic import Rule
except ImportError:
    require("textworld", extra="alfworld", what="envkit/ALFWorld-v0")  # raises MissingExtraError with the fix
    require("alfworld", extra="alfworld", what="envkit/ALFWorld-v0")
    require("fast_downward", extra="alfworld", what="envkit/ALFWorld-v0")
    raise
finally:  # importing alfworld sets $ALFWORLD_DATA to its default when unset: leave the environment as it was
    if _ALFWORLD_DATA is None:
        os.environ.pop("ALFWORLD_DATA", None)

__all__ = ["CachedGrammar", "Engine", "EngineState", "GameAssets", "load_assets"]


# ----- grammar with memoised parses ------------------------------------------------------------------------
_PARSE_LOCK = threading.Lock()
_SYMBOLS: dict[str, list[Any]] = {}
_QUERIES: dict[str, Rule] = {}


def _symbols(text: str) -> list[Any]:
    """A fresh copy of the parsed symbols of `text` (the parse is cached; derivation mutates symbols)."""
    cached = _SYMBOLS.get(text)
    if cached is None:
        with _PARSE_LOCK:
            cached = textgen._parse_and_convert(text, rule_name="symbols")
            _SYMBOLS[text] = cached
    return deepcopy(cached)


def _query_rule(expr: str) -> Rule:
    rule = _QUERIES.get(expr)
    if rule is None:
        with _PARSE_LOCK:
            rule = Rule.parse_conjunctive_query(expr)
            _QUERIES[expr] = rule
    return rule


def _ctx(context: Mapping[str, Any]) -> dict[str, Any]:
    """`textgen.copy_context` without deep-copying the variable and mapping values.

    TextWorld deep-copies them, but derivation only rebinds names in these dicts and never mutates the values
    (entity infos, placeholders, variables), so shallow copies give the same derivations at a fraction of the
    cost (this deep copy was most of a step's time).
    """
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def _copy_symbol(symbol: Any, context: Mapping[str, Any]) -> Any:
    """`Symbol.copy` without deep-copying the symbol's old context."""
    old = getattr(symbol, "context", None)
    memo = {id(old): None} if isinstance(old, dict) and old else {}
    new = deepcopy(symbol, memo)
    new.context = _ctx(context)
    return new


def _conditional(symbol: Any) -> list[Any]:
    """`textgen.ConditionalSymbol.derive` with the query's parse cached."""
    context = _ctx(symbol.context)
    contexts = [context]
    if symbol.given:
        contexts = []
        for mapping in context["state"].all_assignments(_query_rule(symbol.given), context["mapping"]):
            ctx = _ctx(context)
            ctx["variables"].update({ph.name: ctx["entity_infos"][var.name] for ph, var in mapping.items()})
            ctx["mapping"].update(mapping)
            contexts.append(ctx)
    return [_copy_symbol(symbol.expression, c) for c in contexts]


def _listed(symbol: Any) -> list[Any]:
    """`textgen.ListSymbol.derive`, deriving a conditional inner symbol with `_conditional`."""
    inner = symbol.symbol
    inner.context = symbol.context
    derivation = _conditional(inner) if isinstance(inner, textgen.ConditionalSymbol) else inner.derive()
    return textgen.display_list(derivation, symbol.context)  # type: ignore[no-any-return]


class CachedGrammar(textgen.ContextSensitiveGrammar):
    """TextWorld's `ContextSensitiveGrammar` with its repeated TatSu parses memoised (same derivations)."""

    def replace(self, start: Any) -> list[Any]:
        rules = self._rules.get(str(start))
        if not rules:
            raise textgen.CSGUnknownSymbolError(start)
        state, mapping = start.context.get("state"), start.context.get("mapping")
        for rule in rules:
            if not rule.condition or any(True for _ in state.all_assignments(_query_rule(rule.condition), mapping)):
                symbols = deepcopy(rule.rhs)
                for symbol in symbols:
                    symbol.context = _ctx(start.context)
                return symbols
        raise IndexError(f"no production of #{start}# applies")  # textworld raises IndexError here too

    def derive(self, start: str, context: Any = None) -> str:
        context = context if context is not None else {}
        derivation = _symbols(start)[::-1]
        for symbol in derivation:
            symbol.context = _ctx(context)
        derived: list[Any] = []
        while derivation:
            symbol = derivation.pop()
            if isinstance(symbol, textgen.TerminalSymbol):
                derived.append(symbol)
            elif isinstance(symbol, textgen.NonterminalSymbol):
                derivation += self.replace(symbol)[::-1]
            elif isinstance(symbol, textgen.ConditionalSymbol):
                derivation += _conditional(symbol)[::-1]
            elif isinstance(symbol, textgen.ListSymbol):
                derivation += _listed(symbol)[::-1]
            elif isinstance(symbol, textgen.EvalSymbol):
                derivation += symbol.derive()[::-1]
            else:
                raise NotImplementedError(f"Unknown symbol: {type(symbol)}")
        return "".join(map(str, derived))


# ----- per-game assets -------------------------------------------------------------------------------------
@contextmanager
def _argv_kept() -> Iterator[None]:
    """`fast_downward.pddl2sas` overwrites ``sys.argv``; put it back."""
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


def _translate(domain: str, problem: str, optimize: bool) -> tuple[Any, str]:
    with _argv_kept():
        return fast_downward.pddl2sas(domain, problem, optimize=optimize)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class FactSets:
    """The Python-side fact sets of a `PddlState` (copied in and out; never mutated in place)."""

    facts: Mapping[Any, frozenset[Any]]
    vars_by_name: Mapping[str, Any]
    vars_by_type: Mapping[str, frozenset[Any]]
    var_counts: Mapping[Any, int]

    @classmethod
    def of(cls, st: Any) -> FactSets:
        return cls(
            {k: frozenset(v) for k, v in st._facts.items() if v},
            dict(st._vars_by_name),
            {k: frozenset(v) for k, v in st._vars_by_type.items() if v},
            dict(st._var_counts),
        )

    def into(self, st: Any) -> None:
        st._facts = defaultdict(set, {k: set(v) for k, v in self.facts.items()})
        st._vars_by_name = dict(self.vars_by_name)
        st._vars_by_type = defaultdict(set, {k: set(v) for k, v in self.vars_by_type.items()})
        st._var_counts = Counter(self.var_counts)


@dataclass(frozen=True)
class GameAssets:
    """What one game file determines (shared read-only by every `Engine` in the process)."""

    key: str
    data: Mapping[str, Any]
    logic: Any
    task: Any
    sas: str
    sas_replan: str
    name2type: Mapping[str, str]
    initial: FactSets
    entity_infos: Mapping[str, EntityInfo]


_ASSETS: OrderedDict[str, GameAssets] = OrderedDict()
_ASSETS_LOCK = threading.Lock()


def _build_assets(key: str, data: Mapping[str, Any], lib: Any) -> GameAssets:
    logic = pddl_logic.GameLogic(domain=data["pddl_domain"], grammar=data["grammar"])
    grammar = CachedGrammar()
    grammar.update(logic.grammar)
    logic.grammar = grammar
    task, sas = _translate(logic.domain, data["pddl_problem"], optimize=False)
    _, sas_replan = _translate(logic.domain, data["pddl_problem"], optimize=True)
    for type_ in task.types:
        try:
            logic.types.add(textworld.logic.Type(type_.name, type_.supertype_names))
        except ValueError:
            pass
    name2type = {o.name: o.type_name for o in task.objects}
    # The initial fact sets, computed exactly as `PddlState.__init__` does (static facts from the task, dynamic
    # ones from the SAS initial state), with the caller's libdownward (copies are never unloaded: see `Engine`).
    st = _blank_state(lib, logic, data["pddl_problem"], task, sas, sas_replan, name2type)
    lib.load_sas(sas.encode("utf-8"))
    facts = [_atom2proposition(atom, name2type) for atom in task.init]
    st.add_facts([f for f in facts if f is not None])
    atoms = (pddl_logic.Atom * lib.get_state_size())()
    lib.get_state(atoms)
    st.add_facts([f for f in (a.get_fact(name2type) for a in atoms) if not f.is_negation])
    infos = {v.name: EntityInfo(v.name, v.type) for fact in st.facts for v in fact.arguments}
    for info in infos.values():
        info.name, info.definite, info.indefinite = info.id, "the", "a"
    demangler = Demangler(game_infos=infos, shuffle=False)  # what alfworld's AlfredDemangler wrapper does
    for info in infos.values():
        info.name = demangler.demangle_alfred_name(info.id)
    return GameAssets(key, data, logic, task, sas, sas_replan, name2type, FactSets.of(st), infos)


def _atom2proposition(atom: Any, name2type: Mapping[str, str]) -> Any:
    """`PddlState.__init__`'s conversion of the task's initial atoms (static facts included)."""
    translate = fast_downward.translate
    if isinstance(atom, translate.pddl.conditions.Atom):
        if atom.predicate == "=":
            return None
        return textworld.logic.Proposition(
            atom.predicate, [textworld.logic.Variable(a, name2type[a]) for a in atom.args]
        )
    if isinstance(atom, translate.pddl.f_expression.Assign):
        if atom.fluent.symbol == "total-cost":
            return None
        name = f"{atom.expression.value}"
        if str.isdigit(name):
            return None
        return textworld.logic.Proposition(name, [textworld.logic.Variable(a, name2type[a]) for a in atom.fluent.args])
    return None


def _blank_state(
    lib: Any, logic: Any, problem: str, task: Any, sas: str, sas_replan: str, name2type: Mapping[str, str]
) -> Any:
    """A `PddlState` with its translation fields set and empty fact sets (no re-translation)."""
    st = pddl_logic.PddlState.__new__(pddl_logic.PddlState)
    st._facts, st._vars_by_name, st._vars_by_type, st._var_counts = defaultdict(set), {}, defaultdict(set), Counter()
    st._logic, st.downward_lib, st.pddl_problem = logic, lib, problem
    st.task, st.sas, st.sas_replan = task, sas, sas_replan
    st._actions = {a.name: a for a in task.actions}
    st.name2type = dict(name2type)
    st._operators = {}
    return st


class _HashSafePickler(pickle.Pickler):
    """Pickles TextWorld's logic values by constructor arguments: they cache ``hash(str)`` in ``_hash``, which
    differs between processes (hash randomisation), so plain pickles break set and dict lookups elsewhere."""

    def reducer_override(self, obj: Any) -> Any:
        t = type(obj)
        if t is textworld.logic.Variable or t is textworld.logic.Placeholder:
            return t, (obj.name, obj.type)
        if t is textworld.logic.Signature:
            return t, (obj.name, obj.types)
        if t is textworld.logic.Proposition:
            return t, (obj.name, obj.arguments)
        return NotImplemented


def _versions() -> str:
    from importlib.metadata import version

    return ";".join(f"{p}={version(p)}" for p in ("textworld", "alfworld", "fast-downward-textworld"))


def load_assets(
    gamefile: str | Path, engine: Engine, cache_size: int = 64, disk_cache: str | Path | None = None
) -> GameAssets:
    """The `GameAssets` of `gamefile` (a ``game.tw-pddl`` JSON file).

    Looked up in the process-wide LRU cache (`cache_size` games), then in `disk_cache` (a directory of pickles
    keyed by the game file's content and the engine packages' versions; written atomically), else built with
    `engine`'s libdownward (its loaded task is replaced; its next `reset` reloads).
    """
    key = str(Path(gamefile).resolve())
    with _ASSETS_LOCK:
        hit = _ASSETS.get(key)
        if hit is not None:
            _ASSETS.move_to_end(key)
            return hit
    raw = Path(key).read_bytes()
    pkl = None
    if disk_cache is not None:
        digest = hashlib.sha256(raw + _versions().encode()).hexdigest()[:32]
        pkl = Path(disk_cache) / f"{digest}.pkl"
    assets = None
    if pkl is not None and pkl.exists():
        try:
            with pkl.open("rb") as f:
                assets = replace(pickle.load(f), key=key)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError):
            assets = None  # a stale or partial cache entry: rebuild it
    if assets is None:
        engine._loaded = None
        engine.generation += 1
        assets = _build_assets(key, json.loads(raw), engine.downward_lib)
        if pkl is not None:
            pkl.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=pkl.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                _HashSafePickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(assets)
            os.replace(tmp, pkl)
    with _ASSETS_LOCK:
        _ASSETS[key] = assets
        while len(_ASSETS) > max(1, cache_size):
            _ASSETS.popitem(last=False)
    return assets


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
        st = _blank_state(lib, a.logic, a.data["pddl_problem"], a.task, a.sas, a.sas_replan, a.name2type)
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
