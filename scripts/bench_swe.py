"""Benchmark SWE work-tree snapshots: overlay layers vs a full copy vs a git tree, side by side in one run.

The repository: ``--files`` (2,000) real files copied from this Python's standard library. Each round edits 10
files, deletes 2 and creates 3, then times snapshot and restore for each mechanism on its own copy of the tree:

- overlay: `OverlayTree.freeze()` (the upper dir becomes a layer; remount) and `OverlayTree.mount(stack)`;
- copy: ``cp -a`` of the tree to a snapshot dir, and back (``rm -rf`` + ``cp -a``);
- git: ``git add -A`` + ``git write-tree`` with a private index, and ``git read-tree --reset -u`` + ``git clean``.

The overlay runs twice: with its upper dir in the store (``overlay``: freeze is a rename, no write cap) and on a
capped tmpfs (``overlay_capped``: what the env uses; freeze copies the edits into the store). Also: the SWE env's
own ``snapshot()`` + ``restore()`` (base-class bookkeeping included), the cost of a snapshot that merges a deep
layer stack, and one sandboxed command with and without the per-backend cgroup. The cost of each trust layer
(issue 23) is measured on its own: the size/inode walk `freeze` does before it copies the edits, the static
screen of a graded diff, and a whole grade (supervisor + audited pytest child) of a shipped task. Prints one
JSON object (milliseconds: medians and p90s) and writes it to ``--out`` (default
``docs/results/bench_swe.json``); ``target_10ms_met`` checks the capped overlay and the env. Needs root.

    python scripts/bench_swe.py --files 2000 --rounds 15
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tyro
from tqdm import tqdm

from envkit.envs.swe.layer_files import usage
from envkit.envs.swe.layers import LayerStore
from envkit.envs.swe.overlay import OverlayTree


def make_repo(dest: Path, n: int) -> tuple[int, int]:
    """Copy n stdlib files into dest; returns (files, bytes)."""
    src = Path(sysconfig.get_paths()["stdlib"])
    count = size = 0
    for path in sorted(src.rglob("*")):
        if count >= n:
            break
        if not path.is_file() or "site-packages" in path.parts or "__pycache__" in path.parts:
            continue
        out = dest / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, out)
        count += 1
        size += out.stat().st_size
    return count, size


def edit(root: Path, i: int, files: list[str]) -> None:
    """10 edits, 2 deletions, 3 new files (round i)."""
    for k in range(10):
        p = root / files[(i * 17 + k * 31) % len(files)]
        if p.exists():
            with open(p, "a") as f:
                f.write(f"\n# round {i} edit {k}\n")
    for k in range(2):
        p = root / files[(i * 13 + k * 7 + 5) % len(files)]
        if p.exists():
            p.unlink()
    for k in range(3):
        (root / f"new_{i}_{k}.txt").write_text("x" * 1000)


def stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median": round(statistics.median(xs), 2), "p90": round(xs[int(0.9 * (len(xs) - 1))], 2)}


CPU: list[float] = []  # CPU ms of the last timed call (this thread + waited-for children), for the summary


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Wall ms of fn() (its CPU ms, thread + children, is appended to CPU)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0 = time.thread_time() + ch.ru_utime + ch.ru_stime
    t = time.perf_counter()
    out = fn()
    wall = 1000 * (time.perf_counter() - t)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(1000 * (time.thread_time() + ch.ru_utime + ch.ru_stime - c0))
    return wall, out


def cpu_stats() -> dict[str, dict[str, float]]:
    """CPU ms of the timed calls since CPU was cleared (alternating snapshot, restore)."""
    return {"snapshot_cpu_ms": stats(CPU[0::2]), "restore_cpu_ms": stats(CPU[1::2])}


def bench_overlay(
    root: Path, src: Path, listing: list[str], rounds: int, deep: int, size_mb: int | None
) -> tuple[dict[str, object], dict[str, object]]:
    """Snapshot/restore timings of an `OverlayTree` (upper dir capped at `size_mb` on a tmpfs, or uncapped)."""
    store = LayerStore(root)
    base = store.import_tree(src)
    tree = OverlayTree(store, pinned=1, max_layers=48, size_mb=size_mb)
    tree.mount((base,))
    snap_ms: list[float] = []
    rest_ms: list[float] = []
    walk_ms: list[float] = []
    CPU.clear()
    for i in tqdm(range(rounds), desc=f"overlay size_mb={size_mb}", file=sys.stderr):
        edit(Path(tree.merged), i, listing)
        t = time.perf_counter()
        usage(tree._upper)  # what freeze's size/inode budget check costs (timed apart; freeze does it again)
        walk_ms.append(1000 * (time.perf_counter() - t))
        ms, stack = timed(tree.freeze)
        snap_ms.append(ms)
        edit(Path(tree.merged), i + 1000, listing)
        ms, _ = timed(functools.partial(tree.mount, stack))  # type: ignore[arg-type]
        rest_ms.append(ms)
    main_stats: dict[str, object] = {"snapshot_ms": stats(snap_ms), "restore_ms": stats(rest_ms), **cpu_stats()}
    main_stats["budget_walk_ms"] = stats(walk_ms)
    merge_ms: list[float] = []
    for i in tqdm(range(deep), desc="deep stack", file=sys.stderr):
        Path(tree.merged, f"deep_{i}.txt").write_text(str(i))
        ms, stack = timed(tree.freeze)
        if i >= 40:
            merge_ms.append(ms)
    deep_stats = {
        "snapshots": deep,
        "max_layers": tree.max_layers,
        "final_depth": len(tree.stack),
        "snapshot_ms_after_40": stats(merge_ms),
    }
    tree.close()
    store.close()
    return main_stats, deep_stats


def bench_budgets(tmp: Path, src: Path, listing: list[str], rounds: int) -> dict[str, object]:
    """Issue 33: the capped overlay's snapshot + restore with every layer charged to an episode account (episode /
    owner / store budgets with floors, ``statvfs``) vs the same tree with no account, interleaved round by
    round; and the parts timed alone. Both measure the copy's real disk use while copying (an ``fstat`` per
    file); ``second_walk_avoided_ms`` is what measuring it by a walk of the copy would have cost."""
    store = LayerStore(tmp / "store-budgets")
    base = store.import_tree(src)
    account = store.open_account("bench", 4096, 400_000)
    trees = {
        "no_account": OverlayTree(store, size_mb=2048),
        "account": OverlayTree(store, size_mb=2048, account=account),
    }
    times: dict[str, dict[str, list[float]]] = {k: {"snapshot": [], "restore": []} for k in trees}
    walk_ms: list[float] = []
    rule_ms: list[float] = []
    for tree in trees.values():
        tree.mount((base,))
    for i in tqdm(range(rounds), desc="budgets", file=sys.stderr):
        for key, tree in trees.items():
            edit(Path(tree.merged), i, listing)
            ms, stack = timed(tree.freeze)
            times[key]["snapshot"].append(ms)
            edit(Path(tree.merged), i + 1000, listing)
            ms, _ = timed(functools.partial(tree.mount, stack))  # type: ignore[arg-type]
            times[key]["restore"].append(ms)
            store.decref(stack)  # type: ignore[arg-type]
        top = trees["account"].stack[-1]
        t = time.perf_counter()
        usage(store.path(top))  # a walk of the layer as it lies in the store (not paid: measured while copying)
        walk_ms.append(1000 * (time.perf_counter() - t))
        t = time.perf_counter()
        fs = os.statvfs(store.root)
        store.budgets.refusal(account, 1 << 20, 10)
        store.budgets.disk_refusal("bench", fs.f_bavail * fs.f_frsize, fs.f_favail)
        rule_ms.append(1000 * (time.perf_counter() - t))
    out: dict[str, object] = {
        k: {"snapshot_ms": stats(v["snapshot"]), "restore_ms": stats(v["restore"])} for k, v in times.items()
    }
    total = {k: statistics.median(v["snapshot"]) + statistics.median(v["restore"]) for k, v in times.items()}
    out["snapshot_plus_restore_ms"] = {k: round(v, 2) for k, v in total.items()}
    out["account_vs_no_account"] = round(total["account"] / max(total["no_account"], 1e-9), 2)
    out["second_walk_avoided_ms"] = stats(walk_ms)
    out["admission_rule_and_statvfs_ms"] = stats(rule_ms)
    for tree in trees.values():
        tree.close()
    store.close_account(account)
    store.close()
    from envkit.envs.swe.env import SWEEnv  # the env's own snapshot() + restore(): every layer charged

    env = SWEEnv(max_steps=10_000)
    try:
        env.reset(seed=0, options={"index": 0})
        snap_ms, rest_ms = [], []
        for i in range(rounds):
            Path(env.root, f"e{i}.txt").write_text("e")
            ms, snap = timed(env.snapshot)
            snap_ms.append(ms)
            Path(env.root, "README.rst").unlink(missing_ok=True)
            ms, _ = timed(functools.partial(env.restore, snap))  # type: ignore[arg-type]
            rest_ms.append(ms)
        out["swe_env"] = {"snapshot_ms": stats(snap_ms), "restore_ms": stats(rest_ms)}
        env_total = statistics.median(snap_ms) + statistics.median(rest_ms)
    finally:
        env.close()
    out["target_10ms_met"] = {"overlay_capped_2000_files": total["account"] <= 10.0, "swe_env": env_total <= 10.0}
    return out


def bench_commands(tmp: Path, rounds: int) -> dict[str, object]:
    """Wall ms of ``bash -c true`` in the local sandbox with and without the per-backend cgroup."""
    from envkit.envs.swe.layer_files import chown_tree
    from envkit.envs.swe.sandbox import LocalBackend

    work = tmp / "cmd-tree"
    work.mkdir()
    chown_tree(work, 65534, 65534)
    os.chmod(tmp, 0o755)
    out: dict[str, object] = {}
    for key, cg in (("userns_pidns_no_cgroup", False), ("userns_pidns_cgroup", True)):
        b = LocalBackend(cgroups=cg)
        run = functools.partial(b.run, str(work), "true", cwd="/repo", env=b.base_env(), timeout=10)
        ms = [timed(run)[0] for _ in range(rounds)]
        out[key] = {"command_ms": stats(ms), "cgroup": b.isolation["cgroup"] or b.isolation["cgroup_missing"]}
        b.close()
    return out


def bench_grading(rounds: int) -> dict[str, object]:
    """Wall ms of grading the gold fix of a shipped task (supervisor + audited pytest child), with and without the
    static screen, and of the screen alone."""
    import json as _json

    from envkit.envs.swe.env import SWEEnv
    from envkit.envs.swe.grading import changed_files, screen_layer, source_layer

    env = SWEEnv(max_steps=1000)
    out: dict[str, object] = {}
    try:
        for key, screen in (("grade_ms_screen_on", True), ("grade_ms_screen_off", False)):
            env.screen_diff = screen
            ms = []
            for _ in range(rounds):
                env.reset(seed=0, options={"index": 2})
                env.step(_json.dumps({"tool": "create", "path": "gold.patch", "file_text": env.task.patch}))
                env.step(_json.dumps({"tool": "bash", "command": "git apply gold.patch && rm gold.patch"}))
                wall, g = timed(env.evaluate)
                assert g.success, g.void  # type: ignore[attr-defined]
                ms.append(wall)
            out[key] = stats(ms)
        assert env.layers is not None and env.tree is not None
        stack = env.tree.freeze()
        layer, _ = source_layer(env.store, env.task, env.layers, stack)
        files = changed_files(env.store, layer)
        out["screen_ms"] = stats(
            [timed(lambda: screen_layer(env.store, env.layers, layer, files))[0] for _ in range(20)]
        )  # type: ignore[arg-type]
        env.store.delete(layer)
        env.store.decref(stack)
    finally:
        env.close()
    return out


def sh(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    return subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def bench_env(tasks: object, backend: object, rounds: int) -> dict[str, object]:
    """The env's snapshot() + restore() after an edit, and one bash call (``true``), on the first task."""
    from envkit.envs.swe.env import SWEEnv

    env = SWEEnv(tasks=tasks, backend=backend, max_steps=10_000)  # type: ignore[arg-type]
    try:
        env.reset(seed=0, options={"index": 0})
        snap_ms, rest_ms, cmd_ms = [], [], []
        for i in range(rounds):
            Path(env.root, f"e{i}.txt").write_text("e")
            ms, s = timed(env.snapshot)
            snap_ms.append(ms)
            ms, _ = timed(functools.partial(env.restore, s))  # type: ignore[arg-type]
            rest_ms.append(ms)
            ms, _ = timed(functools.partial(env.step, '{"tool": "bash", "command": "true"}'))
            cmd_ms.append(ms)
        return {"snapshot_ms": stats(snap_ms), "restore_ms": stats(rest_ms), "command_ms": stats(cmd_ms)}
    finally:
        env.close()


def bench_environments(tmp: Path, rounds: int, docker: bool) -> dict[str, object]:
    """Host-Python task (more-itertools) vs a task in its own environment (parse_type): local backend (venv
    prefix) and, with `docker`, the docker backend (host binds vs the task's image) on a private Podman service."""
    from envkit.envs.swe.env_build import build_image, build_prefix
    from envkit.envs.swe.tasks import TASKS_DIR, load_tasks

    host, own = load_tasks(), load_tasks(TASKS_DIR / "parse_type.jsonl.gz")
    build_prefix("parse_type")
    out: dict[str, object] = {"local_host": bench_env(host, "local", rounds), "local_prefix": bench_env(own, "local", rounds)}  # fmt: skip
    if docker:
        from envkit.envs.swe.container import DockerBackend, start_podman_service

        build_image("parse_type")
        url, proc = start_podman_service(tmp / "podman")
        try:
            out["docker_host"] = bench_env(host, DockerBackend(base_url=url), rounds)
            out["docker_image"] = bench_env(own, DockerBackend(base_url=url), rounds)
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    def ratio(a: str, b: str, key: str) -> float:
        return round(out[a][key]["median"] / max(out[b][key]["median"], 1e-9), 2)  # type: ignore[index]

    pairs = [("local_prefix", "local_host")] + ([("docker_image", "docker_host")] if docker else [])
    out["own_vs_host"] = {
        f"{a}/{b}": {k: ratio(a, b, k) for k in ("snapshot_ms", "restore_ms", "command_ms")} for a, b in pairs
    }
    return out


def main(
    files: int = 2000,
    rounds: int = 15,
    deep: int = 60,
    docker: bool = True,
    grades: int = 3,
    out: str = "docs/results/bench_swe.json",
    budgets_only: bool = False,
) -> None:
    """Run the benchmark, print one JSON object and write it to `out`.

    Args:
        files: Files in the repository.
        rounds: Snapshot/restore rounds per mechanism.
        deep: Successive snapshots for the layer-merge measurement.
        docker: Also measure the docker backend (host binds vs the parse_type image; needs podman).
        grades: Grades per setting for the grading-layer costs (0: skip them).
        out: Where the JSON goes ("" : only printed).
        budgets_only: Measure only the issue-33 layer budgets (``budgets_issue33``) and merge them into `out`.
    """
    tmp = Path(tempfile.mkdtemp(prefix="envkit-bench-swe-"))
    try:
        src = tmp / "src"
        n, size = make_repo(src, files)
        listing = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
        result: dict[str, object] = {"files": n, "megabytes": round(size / 1e6, 1), "rounds": rounds}
        budgets = bench_budgets(tmp, src, listing, rounds)
        budgets["load_average"] = [round(x, 2) for x in os.getloadavg()]
        if budgets_only:
            old = json.loads(Path(out).read_text()) if out and Path(out).exists() else {}
            old["budgets_issue33"] = budgets
            print(json.dumps(budgets))
            if out:
                Path(out).write_text(json.dumps(old, indent=1) + "\n")
            return
        result["budgets_issue33"] = budgets

        # overlay: upper dir in the store (no write cap) vs on a capped tmpfs (what the env uses), side by side
        for key, size_mb in (("overlay", None), ("overlay_capped", 2048)):
            result[key], result[f"{key}_deep_stack"] = bench_overlay(
                tmp / f"store-{key}", src, listing, rounds, deep, size_mb
            )
        result["overlay_capped"]["size_mb"] = 2048  # type: ignore[index]

        # one sandboxed command: the isolation layers' cost per bash call
        result["sandbox_command"] = bench_commands(tmp, rounds)

        # full copy
        work = tmp / "copy"
        shutil.copytree(src, work, symlinks=True)
        snap_ms, rest_ms = [], []
        CPU.clear()
        for i in tqdm(range(rounds), desc="cp -a", file=sys.stderr):
            edit(work, i, listing)
            dst = tmp / f"copy_snap_{i}"
            ms, _ = timed(functools.partial(sh, "cp", "-a", str(work), str(dst), cwd=tmp))
            snap_ms.append(ms)
            edit(work, i + 1000, listing)

            def back(d: Path = dst) -> None:
                shutil.rmtree(work)
                sh("cp", "-a", str(d), str(work), cwd=tmp)

            ms, _ = timed(back)
            rest_ms.append(ms)
            shutil.rmtree(dst)
        result["copy"] = {"snapshot_ms": stats(snap_ms), "restore_ms": stats(rest_ms), **cpu_stats()}

        # git tree with a private index
        work = tmp / "git"
        shutil.copytree(src, work, symlinks=True)
        env = {
            **os.environ,
            "GIT_INDEX_FILE": str(tmp / "git.index"),
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@b",
        }
        env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
        sh("git", "init", "-q", cwd=work)
        sh("git", "add", "-A", cwd=work, env=env)
        sh("git", "write-tree", cwd=work, env=env)
        snap_ms, rest_ms = [], []
        CPU.clear()
        for i in tqdm(range(rounds), desc="git", file=sys.stderr):
            edit(work, i, listing)
            ms, tree_id = timed(lambda: (sh("git", "add", "-A", cwd=work, env=env), sh("git", "write-tree", cwd=work, env=env))[1].strip())  # fmt: skip
            snap_ms.append(ms)
            edit(work, i + 1000, listing)
            ms, _ = timed(lambda t=tree_id: (sh("git", "read-tree", "--reset", "-u", str(t), cwd=work, env=env), sh("git", "clean", "-fdxq", cwd=work, env=env)))  # type: ignore[misc]  # fmt: skip
            rest_ms.append(ms)
        result["git"] = {"snapshot_ms": stats(snap_ms), "restore_ms": stats(rest_ms), **cpu_stats()}

        # the env's own snapshot()/restore() on a shipped task (base-class bookkeeping included)
        from envkit.envs.swe.env import SWEEnv

        env_obj = SWEEnv(max_steps=1000)
        env_obj.reset(seed=0, options={"index": 0})
        snap_ms, rest_ms = [], []
        for i in range(rounds):
            Path(env_obj.root, f"e{i}.txt").write_text("e")
            ms, s = timed(env_obj.snapshot)
            snap_ms.append(ms)
            Path(env_obj.root, "README.rst").unlink(missing_ok=True)
            ms, _ = timed(functools.partial(env_obj.restore, s))  # type: ignore[arg-type]
            rest_ms.append(ms)
        env_obj.close()
        result["swe_env"] = {"snapshot_ms": stats(snap_ms), "restore_ms": stats(rest_ms)}

        # tasks in their own environment (venv prefix, image) beside host-Python tasks
        result["task_environments"] = bench_environments(tmp, rounds, docker)

        total = {
            k: result[k]["snapshot_ms"]["median"] + result[k]["restore_ms"]["median"]  # type: ignore[index]
            for k in ("overlay", "overlay_capped", "copy", "git", "swe_env")
        }
        result["snapshot_plus_restore_ms"] = {k: round(v, 2) for k, v in total.items()}
        result["speedup_vs_overlay"] = {k: round(v / max(total["overlay"], 1e-9), 1) for k, v in total.items()}
        result["target_10ms_met"] = max(total["overlay_capped"], total["swe_env"]) <= 10.0
        if grades:
            result["grading"] = bench_grading(grades)
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(result))
        if out:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(json.dumps(result, indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    tyro.cli(main)
