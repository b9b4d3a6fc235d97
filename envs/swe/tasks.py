"""SWE tasks: the record format, JSONL loading (envkit's own and SWE-bench's), and the shipped task set.

A `SweTask` is a repository tree, an issue text, the tests that must pass (``FAIL_TO_PASS``) and keep passing
(``PASS_TO_PASS``), and a gold patch. Where the tree comes from is `SweTask.source`:

- ``archive:<file>``: a ``.tar.gz``/``.zip`` (e.g. a pip-downloaded sdist) next to the JSONL file, or an absolute
  path; its single top-level directory is stripped.
- ``dir:<path>``: a directory.
- ``git:<path>@<commit>``: a commit of a local git repository (``git archive``): SWE-bench instances.
- ``image:<image>:<dir>``: a directory of a local container image (e.g. ``/testbed`` of a SWE-bench image).

The agent starts from the source tree with `SweTask.bug_patch` applied (generated tasks carry the injected bug
there; SWE-bench instances have none). The gold state is the start tree plus `SweTask.patch`; tests run after
`SweTask.test_patch` is applied and after every file they live in is reset to its pristine content.

Files: one JSON object per line (``.jsonl`` or ``.jsonl.gz``) with the SWE-bench field names (``instance_id,
repo, base_commit, patch, test_patch, problem_statement, FAIL_TO_PASS, PASS_TO_PASS``) plus envkit's optional
``source, bug_patch, test_command``. `load_swebench` reads real SWE-bench records and finds each repository in a
local directory of clones.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envkit.envs.swe.environments import TaskEnvironment, environment_from_record
from envkit.errors import DataNotFoundError

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
DEFAULT_TASKS = TASKS_DIR / "more_itertools.jsonl.gz"
PYTEST = "python -m pytest -p no:cacheprovider -rA --tb=short -q"


@dataclass(frozen=True)
class SweTask:
    """One SWE task (field names follow SWE-bench; see the module docstring).

    Attributes:
        instance_id: Unique id.
        repo: Repository name (``owner/name`` for SWE-bench).
        problem_statement: The issue text shown to the agent.
        fail_to_pass: Test ids (pytest node ids) that fail at the start and must pass.
        pass_to_pass: Test ids that pass at the start and must keep passing.
        patch: Gold patch (unified diff against the start tree).
        source: Where the tree comes from (``archive:``, ``dir:`` or ``git:``).
        base_commit: The commit (SWE-bench); informational for other sources.
        bug_patch: Diff from the source tree to the start tree ("" when they are the same).
        test_patch: Diff applied to the start tree before tests run (SWE-bench's hidden tests).
        test_command: Shell command the test ids are appended to (pytest with ``-rA``).
        metadata: Anything else (mutation kind, function, file), JSON-able.
        environment: Where commands and tests run (`envkit.envs.swe.environments`); None: the host's Python.
    """

    instance_id: str
    repo: str
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    patch: str
    source: str
    base_commit: str = ""
    bug_patch: str = ""
    test_patch: str = ""
    test_command: str = PYTEST
    metadata: Mapping[str, Any] = field(default_factory=dict)
    environment: TaskEnvironment | None = None

    def __post_init__(self) -> None:
        if not self.instance_id:
            raise ValueError("SweTask.instance_id must be a non-empty string")
        if not self.fail_to_pass:
            raise ValueError(f"task {self.instance_id}: FAIL_TO_PASS is empty; a task needs a failing test")
        if not self.source.startswith(("archive:", "dir:", "git:", "image:")):
            raise ValueError(
                f"task {self.instance_id}: source {self.source!r} must start with 'archive:', 'dir:', 'git:' or 'image:'"
            )

    @property
    def test_ids(self) -> tuple[str, ...]:
        """FAIL_TO_PASS then PASS_TO_PASS."""
        return (*self.fail_to_pass, *self.pass_to_pass)

    def test_files(self) -> tuple[str, ...]:
        """Repository-relative files holding the tests, plus those the test patch touches (reset before tests)."""
        files = {i.split("::", 1)[0] for i in self.test_ids if "::" in i}
        files |= set(patch_paths(self.test_patch))
        return tuple(sorted(files))

    def to_record(self) -> dict[str, Any]:
        """The JSON record (SWE-bench field names)."""
        d = asdict(self)
        d["FAIL_TO_PASS"] = list(d.pop("fail_to_pass"))
        d["PASS_TO_PASS"] = list(d.pop("pass_to_pass"))
        d["metadata"] = dict(self.metadata)
        d.pop("environment")
        if self.environment is not None:
            d["environment"] = self.environment.to_record()
        return d


def _ids(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # SWE-bench on the HF hub stores these lists as JSON strings
        value = json.loads(value) if value.strip() else []
    return tuple(str(v) for v in value or ())


def task_from_record(
    rec: Mapping[str, Any], *, base_dir: Path | None = None, source: str | None = None, image_template: str = ""
) -> SweTask:
    """Build a `SweTask` from a JSON record (SWE-bench or envkit field names; the environment as
    `environment_from_record` reads it)."""
    src = source or str(rec.get("source", ""))
    if src.startswith("archive:") and base_dir is not None and not os.path.isabs(src[8:]):
        src = "archive:" + str(base_dir / src[8:])
    return SweTask(
        instance_id=str(rec["instance_id"]),
        repo=str(rec.get("repo", "")),
        problem_statement=str(rec.get("problem_statement", "")),
        fail_to_pass=_ids(rec.get("FAIL_TO_PASS", rec.get("fail_to_pass"))),
        pass_to_pass=_ids(rec.get("PASS_TO_PASS", rec.get("pass_to_pass"))),
        patch=str(rec.get("patch", "")),
        source=src,
        base_commit=str(rec.get("base_commit", "")),
        bug_patch=str(rec.get("bug_patch", "")),
        test_patch=str(rec.get("test_patch", "")),
        test_command=str(rec.get("test_command") or PYTEST),
        metadata=dict(rec.get("metadata") or {}),
        environment=environment_from_record(rec, image_template=image_template),
    )


def _open(path: Path) -> Any:
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """JSON objects of a ``.jsonl`` / ``.jsonl.gz`` / ``.json`` (list) file."""
    p = Path(path)
    if not p.exists():
        raise DataNotFoundError(f"task file {p} does not exist; build one with scripts/make_swe_tasks.py")
    with _open(p) as f:
        text = f.read()
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def shipped_task_sets() -> list[str]:
    """Names of the task sets shipped with envkit (``more_itertools``, ``parse_type``): ``tasks=NAME`` loads one."""
    return sorted(p.name.removesuffix(".jsonl.gz") for p in TASKS_DIR.glob("*.jsonl.gz"))


def tasks_path(path: str | Path | None) -> Path:
    """Where the tasks of `path` are: a file, or a shipped set by name (``"parse_type"``), from any folder.

    A path that does not exist but names a shipped file (``envs/swe/tasks/parse_type.jsonl.gz`` written relative
    to a checkout) is that shipped file. Raises `DataNotFoundError` naming the shipped sets otherwise.
    """
    if path is None:
        return DEFAULT_TASKS
    p = Path(path)
    if p.exists():
        return p
    name = p.name.removesuffix(".jsonl.gz")
    if name in shipped_task_sets() and (str(path) == name or p.name == f"{name}.jsonl.gz"):
        return TASKS_DIR / f"{name}.jsonl.gz"
    raise DataNotFoundError(
        f"task file {p} does not exist. Shipped sets (tasks=NAME): {', '.join(shipped_task_sets())}; "
        "your own: a .jsonl/.jsonl.gz path (scripts/make_swe_tasks.py generates one, load_swebench reads SWE-bench)"
    )


def load_tasks(path: str | Path | None = None) -> list[SweTask]:
    """Load envkit task records: a file, or a shipped set by name (`tasks_path`; default: more-itertools)."""
    p = tasks_path(path)
    return [task_from_record(r, base_dir=p.parent) for r in read_records(p)]


def save_tasks(tasks: Iterable[SweTask], path: str | Path) -> None:
    """Write tasks as JSONL (gzip when the name ends with .gz, with a fixed mtime so the bytes reproduce)."""
    p = Path(path)
    lines = "".join(json.dumps(t.to_record(), sort_keys=True) + "\n" for t in tasks)
    if p.suffix == ".gz":
        with open(p, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(lines.encode("utf-8"))
    else:
        p.write_text(lines, encoding="utf-8")


def find_repo(repos_dir: Path, repo: str) -> Path | None:
    """A local clone of ``owner/name`` under `repos_dir` (``owner__name``, ``owner/name`` or ``name``)."""
    owner, _, name = repo.rpartition("/")
    for cand in (repos_dir / f"{owner}__{name}", repos_dir / repo, repos_dir / name):
        if (cand / ".git").exists() or (cand / "HEAD").exists():
            return cand
    return None


def load_swebench(
    path: str | Path,
    repos_dir: str | Path | None = None,
    *,
    skip_missing: bool = True,
    image_template: str = "",
) -> list[SweTask]:
    """Load SWE-bench-format JSONL records (SWE-bench, SWE-Gym, R2E-Gym, SWE-smith exports).

    Args:
        path: A ``.jsonl``/``.jsonl.gz``/``.json`` export (fields ``instance_id, repo, base_commit, patch,
            test_patch, problem_statement, FAIL_TO_PASS, PASS_TO_PASS``; an image name in ``image_name`` or
            ``docker_image``, see `environment_from_record`).
        repos_dir: Directory of git clones named ``owner__name`` (SWE-bench's convention), ``owner/name`` or
            ``name``; each must contain the record's ``base_commit``. None: the tree is read from each record's
            image (``image:<image>:<workdir>``, the repository as the image holds it; needs its image).
        skip_missing: Skip records whose repository is not there (else raise `DataNotFoundError`).
        image_template: Image name for records without one, e.g. ``"swebench/sweb.eval.x86_64.{id}:latest"``
            (`envkit.envs.swe.environments.swebench_image`); the task then runs in that image (docker backend).

    The test command is pytest with the record's test ids; repositories with their own runner (Django's
    ``runtests.py``, SymPy's ``bin/test``) need ``test_command`` set on the records.
    """
    tasks: list[SweTask] = []
    for rec in read_records(path):
        if repos_dir is None:
            env = environment_from_record(rec, image_template=image_template)
            if env is None or not env.image:
                raise DataNotFoundError(
                    f"record {rec['instance_id']} names no image and no repos_dir was given: pass repos_dir "
                    "(local clones) or image_template"
                )
            tasks.append(
                task_from_record(rec, source=f"image:{env.image}:{env.workdir}", image_template=image_template)
            )
            continue
        root = Path(repos_dir)
        clone = find_repo(root, str(rec["repo"]))
        if clone is None:
            if skip_missing:
                continue
            raise DataNotFoundError(
                f"repository {rec['repo']} of {rec['instance_id']} is not under {root}: git clone it to "
                f"{root / str(rec['repo']).replace('/', '__')}"
            )
        tasks.append(task_from_record(rec, source=f"git:{clone}@{rec['base_commit']}", image_template=image_template))
    return tasks


_DIFF_PATH = re.compile(r"^(?:---|\+\+\+) (?:[ab]/)?(.+?)\s*$")


def patch_paths(patch: str) -> list[str]:
    """Repository-relative paths a unified diff touches (old and new names), in order of appearance."""
    seen: dict[str, None] = {}
    for line in patch.splitlines():
        m = _DIFF_PATH.match(line)
        if m and m.group(1) != "/dev/null":
            seen[m.group(1).split("\t")[0]] = None
    return list(seen)


def select(tasks: Sequence[SweTask], ids: Iterable[str] | None) -> list[SweTask]:
    """The tasks named in `ids` (all when None); unknown ids raise KeyError listing known ones."""
    if ids is None:
        return list(tasks)
    by_id = {t.instance_id: t for t in tasks}
    out = []
    for i in ids:
        if i not in by_id:
            raise KeyError(f"unknown task id {i!r}; known: {', '.join(sorted(by_id)[:20])}")
        out.append(by_id[i])
    return out
