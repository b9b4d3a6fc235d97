"""Turn a `SweTask` into layers of a `LayerStore`: its start state, gold state and pristine test files.

Layers are built once per store (cached by source and instance id) and pinned:

- the *source* layer: the extracted archive, directory or ``git archive`` of a commit;
- the *bug* layer: the files `SweTask.bug_patch` changes (start = source + bug);
- the *gold* layer: the files `SweTask.patch` changes (gold = start + gold);
- the *test* layer: the files `SweTask.test_patch` changes (tests run with start + test layer's test files).

Patches are applied with ``git apply`` to copies of just the files they touch, so building a task costs
milliseconds after its source layer exists.
"""

from __future__ import annotations

import compileall
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from envkit.envs.swe.backend import WORKDIR
from envkit.envs.swe.environments import export_image_dir
from envkit.envs.swe.layer_files import chown_tree, is_opaque, is_whiteout
from envkit.envs.swe.layers import LayerStore
from envkit.envs.swe.tasks import SweTask, patch_paths
from envkit.errors import DataNotFoundError, EnvkitError


class PatchError(EnvkitError, ValueError):
    """A patch does not apply to the tree it is meant for."""


def lookup(store: LayerStore, stack: tuple[str, ...], rel: str) -> str | None:
    """Host path of the file `rel` as the overlay of `stack` shows it, or None when it does not exist."""
    parts = [p for p in rel.split("/") if p and p != "."]
    for layer in reversed(stack):
        cur = store.path(layer)
        hidden_below = False
        for i, part in enumerate(parts):
            cur = os.path.join(cur, part)
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                break
            if is_whiteout(st):
                return None
            if i == len(parts) - 1:
                return cur
            if not stat.S_ISDIR(st.st_mode):
                return None
            if is_opaque(cur):
                hidden_below = True
        if hidden_below:
            return None
    return None


def extract_archive(archive: Path, out: str) -> None:
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        if archive.name.endswith(".zip") or archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        else:
            with tarfile.open(archive) as t:
                t.extractall(tmp, filter="data")
        entries = os.listdir(tmp)
        top = (
            os.path.join(tmp, entries[0]) if len(entries) == 1 and os.path.isdir(os.path.join(tmp, entries[0])) else tmp
        )
        for name in os.listdir(top):
            shutil.move(os.path.join(top, name), os.path.join(out, name))


def _git_archive(spec: str, out: str) -> None:
    repo, _, commit = spec.rpartition("@")
    if not repo or not commit:
        raise ValueError(f"git source must be 'git:<path>@<commit>', got 'git:{spec}'")
    proc = subprocess.run(["git", "-C", repo, "archive", "--format=tar", commit], capture_output=True, check=False)
    if proc.returncode != 0:
        raise DataNotFoundError(
            f"git archive of {commit} in {repo} failed: {proc.stderr.decode(errors='replace').strip()}; "
            "fetch that commit into the clone (git fetch origin <commit>)"
        )
    with tempfile.TemporaryFile() as f:
        f.write(proc.stdout)
        f.seek(0)
        with tarfile.open(fileobj=f) as t:
            t.extractall(out, filter="data")


def precompile(directory: str) -> None:
    """Write byte-code next to the layer's .py files (as seen at /repo), so sandboxed runs skip compiling them."""
    compileall.compile_dir(directory, ddir=WORKDIR, quiet=2, workers=1)


def source_layer(store: LayerStore, source: str, uid: int = 65534) -> str:
    """The pinned layer holding `source` (built on first use)."""
    cache: dict[str, str] = store.__dict__.setdefault("_sources", {})
    if source in cache and store.exists(cache[source]):
        return cache[source]
    kind, _, rest = source.partition(":")
    out = store.staging()
    if kind == "archive":
        if not Path(rest).exists():
            raise DataNotFoundError(
                f"task source archive {rest} does not exist; rebuild with scripts/make_swe_tasks.py"
            )
        extract_archive(Path(rest), out)
    elif kind == "dir":
        if not Path(rest).is_dir():
            raise DataNotFoundError(f"task source directory {rest} does not exist")
        shutil.copytree(rest, out, symlinks=True, dirs_exist_ok=True)
    elif kind == "git":
        _git_archive(rest, out)
    elif kind == "image":
        image, _, directory = rest.rpartition(":")
        export_image_dir(image, directory, out)
    else:
        raise ValueError(f"unknown task source kind {kind!r} in {source!r}")
    precompile(out)
    chown_tree(out, uid, uid)
    layer = store.commit(out, store.new_id("s"), pin=True)
    cache[source] = layer
    return layer


def patch_layer(store: LayerStore, stack: tuple[str, ...], patch: str, uid: int = 65534) -> str:
    """A new pinned layer holding what `patch` changes when applied on top of `stack`.

    Raises:
        PatchError: ``git apply`` refused the patch (the message has its output).
    """
    paths = patch_paths(patch)
    out = store.staging()
    existed: set[str] = set()
    for rel in paths:
        src = lookup(store, stack, rel)
        if src is not None and not os.path.isdir(src):
            dst = os.path.join(out, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
            existed.add(rel)
    proc = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-p1", "-"],
        input=patch.encode(),
        cwd=out,
        capture_output=True,
        check=False,
        env={**os.environ, "GIT_CEILING_DIRECTORIES": os.path.dirname(out)},
    )
    if proc.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise PatchError(f"patch does not apply: {proc.stderr.decode(errors='replace').strip()[:2000]}")
    for rel in existed:
        dst = os.path.join(out, rel)
        if not os.path.lexists(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.mknod(dst, stat.S_IFCHR | 0o600, 0)
    precompile(out)
    chown_tree(out, uid, uid)
    return store.commit(out, store.new_id("p"), pin=True)


@dataclass(frozen=True)
class TaskLayers:
    """The stacks of one task in one store.

    Attributes:
        start: The agent's starting state.
        gold: Start plus the gold patch.
        tests: Start plus the test patch (where pristine test files are read from).
    """

    start: tuple[str, ...]
    gold: tuple[str, ...]
    tests: tuple[str, ...]


def task_layers(store: LayerStore, task: SweTask, uid: int = 65534) -> TaskLayers:
    """Build (or fetch from the store's cache) the layers of `task`."""
    cache: dict[str, TaskLayers] = store.__dict__.setdefault("_tasks", {})
    key = f"{task.instance_id}\0{hash((task.source, task.bug_patch, task.patch, task.test_patch))}"
    hit = cache.get(key)
    if hit is not None and all(store.exists(x) for x in (*hit.gold, *hit.tests)):
        return hit
    start: tuple[str, ...] = (source_layer(store, task.source, uid),)
    if task.bug_patch:
        start = (*start, patch_layer(store, start, task.bug_patch, uid))
    gold = (*start, patch_layer(store, start, task.patch, uid)) if task.patch else start
    tests = (*start, patch_layer(store, start, task.test_patch, uid)) if task.test_patch else start
    layers = TaskLayers(start, gold, tests)
    cache[key] = layers
    return layers


def pristine_test_files(store: LayerStore, task: SweTask, layers: TaskLayers) -> dict[str, bytes | None]:
    """Content of every test file of `task` as tests must see it (None: the file must not exist)."""
    out: dict[str, bytes | None] = {}
    for rel in task.test_files():
        p = lookup(store, layers.tests, rel)
        out[rel] = None if p is None else Path(p).read_bytes()
    return out
