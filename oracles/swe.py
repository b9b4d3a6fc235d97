"""Gold-patch oracle of ``envkit/SWE-v0``: bring the work tree to the gold state with the env's own tools.

From any state (the start, or one a policy left: wrong edits, deleted or extra files, changed modes) the oracle
compares the live tree with a mounted view of the task's gold state (start tree + gold patch) and emits one tool
call per step, re-reading the tree every time (closed loop):

1. paths that should not exist (extra files, a file where a directory belongs) -> ``bash rm -rf``;
2. missing directories -> ``bash mkdir -p``; missing or binary files -> ``create`` (several missing files are
   written by one ``bash`` call with base64 heredocs);
3. text files that differ -> one ``str_replace`` per differing hunk (old text with enough preceding context to be
   unique), falling back to ``create`` of the whole file;
4. wrong permission bits -> ``bash chmod``;
5. nothing left -> ``submit``.

Caches and byte-code (``__pycache__``, ``.pytest_cache``, ``*.pyc``) are ignored. It reads hidden state (the gold
tree) through ``env.unwrapped``, which is why it is training-only.
"""

from __future__ import annotations

import base64
import difflib
import json
import os
import shlex
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from oracles.base import OracleGaveUp

_IGNORE_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_BATCH_CHARS = 40_000


def _ignored(name: str) -> bool:
    return name in _IGNORE_DIRS or name.endswith((".pyc", ".pyo"))


def _kind(st: os.stat_result) -> str:
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"


def _entries(path: str) -> dict[str, os.stat_result]:
    try:
        with os.scandir(path) as it:
            return {e.name: e.stat(follow_symlinks=False) for e in it if not _ignored(e.name)}
    except (FileNotFoundError, NotADirectoryError):
        return {}


def _same_file(a: str, sa: os.stat_result, b: str, sb: os.stat_result) -> bool:
    if sa.st_size != sb.st_size:
        return False
    if sa.st_ino == sb.st_ino and sa.st_mtime_ns == sb.st_mtime_ns:
        return True  # the same lower-layer file seen through two overlay mounts
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def tree_differences(cur: str, gold: str, rel: str = "") -> Iterator[tuple[str, str]]:
    """(kind, path) of each difference, parents before children, sorted; kinds: ``extra``, ``missing``,
    ``content``, ``mode``."""
    c, g = _entries(os.path.join(cur, rel)), _entries(os.path.join(gold, rel))
    for name in sorted(set(c) | set(g)):
        path = f"{rel}/{name}" if rel else name
        sc, sg = c.get(name), g.get(name)
        if sg is None:
            yield "extra", path
        elif sc is None:
            yield "missing", path
        elif _kind(sc) != _kind(sg):
            yield "extra", path
            yield "missing", path
        elif _kind(sg) == "dir":
            if stat.S_IMODE(sc.st_mode) != stat.S_IMODE(sg.st_mode):
                yield "mode", path
            yield from tree_differences(cur, gold, path)
        elif _kind(sg) == "link":
            if os.readlink(os.path.join(cur, path)) != os.readlink(os.path.join(gold, path)):
                yield "extra", path
                yield "missing", path
        else:
            if not _same_file(os.path.join(cur, path), sc, os.path.join(gold, path), sg):
                yield "content", path
            if stat.S_IMODE(sc.st_mode) != stat.S_IMODE(sg.st_mode):
                yield "mode", path


def _call(tool: str, **args: Any) -> str:
    return json.dumps({"tool": tool, **args})


def hunk_edit(current: str, gold: str) -> tuple[str, str] | None:
    """(old_str, new_str) fixing the first differing hunk, with preceding context until old_str is unique."""
    a, b = current.splitlines(keepends=True), gold.splitlines(keepends=True)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        lo, hi = i1, i2
        while True:
            old = "".join(a[lo:hi])
            if old and current.count(old) == 1:
                return old, "".join(a[lo:i1]) + "".join(b[j1:j2]) + "".join(a[i2:hi])
            if lo > 0:  # lines before the first differing hunk are equal in both files
                lo -= 1
                continue
            k = hi - i2
            if hi < len(a) and j2 + k < len(b) and a[hi] == b[j2 + k]:
                hi += 1
                continue
            return None
    return None


class GoldPatchOracle:
    """See the module docstring.

    Args:
        batch_files: Write missing files with one bash call when more than this many are missing.
    """

    name = "swe-gold-patch"

    def __init__(self, batch_files: int = 3) -> None:
        self.batch_files = batch_files
        self._env: Any = None

    def start(self, env: gym.Env[Any, Any], observation: str, info: Mapping[str, Any]) -> None:
        base = env.unwrapped
        if not hasattr(base, "gold_root"):
            raise OracleGaveUp(f"GoldPatchOracle drives envkit/SWE-v0, not {type(base).__name__}")
        self._env = base

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        if self._env is None:
            raise OracleGaveUp("start() was not called")
        cur, gold = self._env.root, self._env.gold_root()
        diffs = list(tree_differences(cur, gold))
        extra = [p for k, p in diffs if k == "extra"]
        if extra:
            return _call("bash", command="rm -rf -- " + " ".join(shlex.quote(f"/repo/{p}") for p in extra[:100]))
        missing = [p for k, p in diffs if k == "missing"]
        if missing:
            return self._create(missing, gold)
        for kind, path in diffs:
            if kind == "content":
                return self._fix_content(path, cur, gold)
        modes = [p for k, p in diffs if k == "mode"]
        if modes:
            cmds = [
                f"chmod {stat.S_IMODE(os.lstat(os.path.join(gold, p)).st_mode):o} /repo/{shlex.quote(p)}" for p in modes
            ]
            return _call("bash", command=" && ".join(cmds[:100]))
        return _call("submit")

    def _create(self, missing: list[str], gold: str) -> str:
        first = missing[0]
        host = os.path.join(gold, first)
        st = os.lstat(host)
        if stat.S_ISDIR(st.st_mode):
            dirs = [
                p for p in missing if os.path.isdir(os.path.join(gold, p)) and not os.path.islink(os.path.join(gold, p))
            ]
            return _call("bash", command="mkdir -p -- " + " ".join(shlex.quote(f"/repo/{p}") for p in dirs[:100]))
        if stat.S_ISLNK(st.st_mode):
            return _call("bash", command=f"ln -s -- {shlex.quote(os.readlink(host))} /repo/{shlex.quote(first)}")
        files = [
            p for p in missing if os.path.isfile(os.path.join(gold, p)) and not os.path.islink(os.path.join(gold, p))
        ]
        if len(files) > self.batch_files or not _is_text(host):
            parts: list[str] = []
            size = 0
            for p in files:
                data = base64.b64encode(Path(gold, p).read_bytes()).decode()
                if parts and size + len(data) > _BATCH_CHARS:
                    break
                q = shlex.quote(f"/repo/{p}")
                parts.append(
                    f"mkdir -p -- $(dirname {q}) && base64 -d > {q} <<'__ENVKIT_B64__'\n{data}\n__ENVKIT_B64__"
                )
                size += len(data)
            return _call("bash", command="\n".join(parts))
        return _call("create", path=first, file_text=Path(host).read_text(encoding="utf-8"))

    def _fix_content(self, path: str, cur: str, gold: str) -> str:
        g = os.path.join(gold, path)
        if not _is_text(g) or not _is_text(os.path.join(cur, path)):
            return self._create([path], gold) if _is_text(g) else self._batch_one(path, gold)
        current = Path(cur, path).read_text(encoding="utf-8")
        wanted = Path(g).read_text(encoding="utf-8")
        edit = hunk_edit(current, wanted)
        if edit is None:
            return _call("create", path=path, file_text=wanted)
        return _call("str_replace", path=path, old_str=edit[0], new_str=edit[1])

    def _batch_one(self, path: str, gold: str) -> str:
        data = base64.b64encode(Path(gold, path).read_bytes()).decode()
        q = shlex.quote(f"/repo/{path}")
        return _call("bash", command=f"base64 -d > {q} <<'__ENVKIT_B64__'\n{data}\n__ENVKIT_B64__")


def _is_text(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.read().decode("utf-8")
        return True
    except (UnicodeDecodeError, OSError):
        return False
