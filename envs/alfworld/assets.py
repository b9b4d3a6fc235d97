"""Per-game assets of the ALFWorld engine: parsed grammar, PDDL-to-SAS translations, names, initial facts.

`load_assets` keeps them in a process-wide LRU cache and in a disk cache (pickles keyed by the game file's
content and the engine packages' versions), so resets never re-translate (TextWorld translates twice per
reset) and a new process does not either. The cached objects are TextWorld's `GameLogic` (a parsed grammar)
and fast-downward's translated task, object graphs of two third-party packages that no data format holds
without a serializer of each; so the cache stays a pickle, authenticated: each entry is
``magic + HMAC-SHA256(install key, entry name + pickle) + pickle``, the key being this install's secret
(`envkit.cache.install_key`, kept apart from the cache folders), and `load_assets` unpickles only an entry whose
tag verifies, read from a regular file owned by this user and writable by nobody else (checked on the opened
descriptor, so a swap after the check does not count). Any other entry -- planted, copied from another install,
renamed from another game's entry -- is ignored and rebuilt (a warning says why); nothing else is unpickled.
The cache directory is made mode 0700. Traps handled here: `fast_downward.pddl2sas` overwrites ``sys.argv``
on every call (`_translate` restores it), and TextWorld parses grammars with one module-global TatSu parser that
is not thread-safe (two threads building assets at once corrupt its state stack: ``IndexError: pop from empty
list``), so builds in one process take `_BUILD_LOCK` in turn.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import pickle
import stat
import sys
import tempfile
import threading
import warnings
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envkit.cache import install_key
from envkit.envs.alfworld.deps import Demangler, EntityInfo, fast_downward, pddl_logic, textworld
from envkit.envs.alfworld.grammar import CachedGrammar

__all__ = ["FactSets", "GameAssets", "load_assets"]

#: Bumped when `GameAssets` or the classes it pickles change, so stale disk-cache entries are rebuilt.
_ASSET_FORMAT = 3  # 3: entries carry an HMAC tag


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
#: Serialises `_build_assets`: TextWorld's grammar parser and ``sys.argv`` are process-global state.
_BUILD_LOCK = threading.Lock()


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
    st = blank_state(lib, logic, data["pddl_problem"], task, sas, sas_replan, name2type)
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


def blank_state(
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

    pkgs = ";".join(f"{p}={version(p)}" for p in ("textworld", "alfworld", "fast-downward-textworld"))
    return f"envkit-assets={_ASSET_FORMAT};{pkgs}"


def _open_trusted(path: Path) -> Any:
    """`path` opened for reading if it is a regular file owned by this user and writable by no one else; else
    None (a warning says why). The checks are on the opened descriptor (no symlink is followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    why = ""
    if not stat.S_ISREG(st.st_mode):
        why = "it is not a regular file"
    elif st.st_uid != os.geteuid():
        why = f"it is owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
    elif st.st_mode & 0o022:
        why = f"others may write it (mode {stat.S_IMODE(st.st_mode):o})"
    if why:
        os.close(fd)
        warnings.warn(
            f"ignoring the ALFWorld asset cache entry {path}: {why}; unpickling it could run code. It is rebuilt.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return os.fdopen(fd, "rb")


_MAGIC = b"envkit-assets-hmac1\n"
#: Entries larger than this are not read (a real one is a few MiB).
MAX_ENTRY_BYTES = 256 << 20


def _tag(name: str, payload: bytes) -> bytes:
    return hmac.new(install_key("alfworld-assets"), name.encode() + b"\0" + payload, hashlib.sha256).digest()


def _authenticated(blob: bytes, name: str) -> bytes | None:
    """The pickle in `blob` if its tag is this install's HMAC of (entry name, pickle), else None (a warning
    says why; nothing is unpickled)."""
    n = len(_MAGIC)
    if len(blob) > n + 32 and len(blob) <= MAX_ENTRY_BYTES and blob[:n] == _MAGIC:
        payload = blob[n + 32 :]
        if hmac.compare_digest(blob[n : n + 32], _tag(name, payload)):
            return payload
    warnings.warn(
        f"ignoring the ALFWorld asset cache entry {name}: it does not carry this install's HMAC tag "
        "(planted, copied from another install, or written by an older envkit); it is not unpickled and is rebuilt.",
        RuntimeWarning,
        stacklevel=3,
    )
    return None


def load_assets(
    gamefile: str | Path, engine: Any, cache_size: int = 64, disk_cache: str | Path | None = None
) -> GameAssets:
    """The `GameAssets` of `gamefile` (a ``game.tw-pddl`` JSON file).

    Looked up in the process-wide LRU cache (`cache_size` games), then in `disk_cache` (a directory of pickles
    keyed by the game file's content and the engine packages' versions; written atomically; read only when
    owned by this user and writable by no one else, see the module docstring), else built with `engine`'s
    libdownward (its loaded task is replaced; its next `reset` reloads).
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
    f = _open_trusted(pkl) if pkl is not None else None
    if f is not None:
        with f:
            try:
                blob = f.read(MAX_ENTRY_BYTES + 1)
            except OSError:
                blob = b""
        payload = _authenticated(blob, pkl.name) if pkl is not None else None
        if payload is not None:
            try:
                assets = replace(pickle.loads(payload), key=key)
            except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ImportError, ValueError):
                assets = None  # a stale entry signed by this install (an older package): rebuild it
    if assets is None:
        with _BUILD_LOCK:
            with _ASSETS_LOCK:
                built = _ASSETS.get(key)  # another thread may have built it while this one waited
            if built is not None:
                return built
            engine._loaded = None
            engine.generation += 1
            assets = _build_assets(key, json.loads(raw), engine.downward_lib)
            if pkl is not None:
                pkl.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=pkl.parent, suffix=".tmp")
                buf = io.BytesIO()
                _HashSafePickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(assets)
                payload = buf.getvalue()
                with os.fdopen(fd, "wb") as f:
                    f.write(_MAGIC + _tag(pkl.name, payload) + payload)
                os.replace(tmp, pkl)
            with _ASSETS_LOCK:
                _ASSETS[key] = assets
                while len(_ASSETS) > max(1, cache_size):
                    _ASSETS.popitem(last=False)
            return assets
    with _ASSETS_LOCK:
        _ASSETS[key] = assets
        while len(_ASSETS) > max(1, cache_size):
            _ASSETS.popitem(last=False)
    return assets
