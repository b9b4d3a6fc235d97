"""Offline SWE task generation by bug injection (the SWE-smith idea, without an LLM or a network).

Given a real Python project with tests (a pip-downloaded sdist, a wheel or a directory):

1. `find_mutations` walks the package's functions that its tests mention and proposes one-line bugs:
   a flipped comparison (``<`` -> ``>=``, ``==`` -> ``!=``, ``in`` -> ``not in``...), an off-by-one integer
   constant, a wrong operator (``+`` <-> ``-``, ``*`` -> ``+``, ``//`` -> ``/``, ``and`` <-> ``or``) or a dropped
   statement (a one-line assignment or call in a block of several statements).
2. `Generator.try_mutation` runs the test classes that mention the function on the clean tree and on the mutated
   tree inside the sandbox; a mutation becomes a task when some tests fail: FAIL_TO_PASS are the tests that pass
   clean and fail mutated, PASS_TO_PASS the other tests of those classes that pass in both. The gold patch is the
   reverse of the injected diff.
3. `envkit.oracles.swe.validate` (an oracle runs in it, so it lives a layer up) checks every task through the env itself: submitting the start tree scores 0, applying the gold
   patch (by the gold-patch oracle's tool calls) and submitting scores 1.

``scripts/make_swe_tasks.py`` drives it and writes the JSONL task file.
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import random
import re
import shutil
import tempfile
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from envkit.envs.swe.backend import WORKDIR, Backend
from envkit.envs.swe.environments import TaskEnvironment
from envkit.envs.swe.grading import parse_pytest
from envkit.envs.swe.layer_files import chown_tree
from envkit.envs.swe.sandbox import LocalBackend
from envkit.envs.swe.tasks import PYTEST, SweTask
from envkit.envs.swe.workspace import extract_archive

_FLIP = {
    ast.Lt: ">=",
    ast.LtE: ">",
    ast.Gt: "<=",
    ast.GtE: "<",
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.Is: "is not",
    ast.IsNot: "is",
    ast.In: "not in",
    ast.NotIn: "in",
}
_BINOP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "+"), ast.FloorDiv: ("//", "/")}
_BOOL = {ast.And: ("and", "or"), ast.Or: ("or", "and")}


@dataclass(frozen=True)
class Mutation:
    """One injected bug.

    Attributes:
        path: Repository-relative file.
        function: Qualified name of the function it is in.
        kind: ``flip_comparison`` | ``off_by_one`` | ``wrong_operator`` | ``drop_statement``.
        line: 1-based line number.
        before: The original line.
        after: The mutated line ("" when the statement is dropped).
    """

    path: str
    function: str
    kind: str
    line: int
    before: str
    after: str

    def apply(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        assert lines[self.line - 1] == self.before
        lines[self.line - 1] = self.after
        return "".join(lines)


def unified_diff(path: str, old: str, new: str) -> str:
    """A ``git apply``-able diff of one file."""
    body = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}", n=3))
    return f"diff --git a/{path} b/{path}\n{body}"


def _op_span(line: str, start: int, end: int, token: str) -> tuple[int, int] | None:
    """Column span of operator `token` between character offsets start..end of `line` (ignoring strings)."""
    seg = line[start:end]
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(seg).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    words = token.split()
    for i, tok in enumerate(toks):
        if tok.string == words[0] and all(i + k < len(toks) and toks[i + k].string == w for k, w in enumerate(words)):
            last = toks[i + len(words) - 1]
            return start + tok.start[1], start + last.end[1]
    return None


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "ignore"))


def _line_compiles(line: str) -> bool:
    """Cheap check that a one-line statement still parses on its own (saves re-parsing the whole file)."""
    text = line.strip()
    for kw in ("elif ", "while "):
        if text.startswith(kw):
            text = "if " + text[len(kw) :]
    if text.endswith(":"):
        text += " pass"
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + child.name, child
                yield from walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")

    yield from walk(tree, "")


def find_mutations(root: str | Path, rel: str) -> list[Mutation]:
    """Every one-line mutation of file `rel` under `root` that still compiles (see the module docstring)."""
    text = (Path(root) / rel).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    out: list[Mutation] = []

    def add(fn: str, kind: str, lineno: int, new_line: str) -> None:
        old = lines[lineno - 1]
        if new_line == old:
            return
        if new_line and not _line_compiles(new_line):
            candidate = "".join(lines[: lineno - 1]) + new_line + "".join(lines[lineno:])
            try:
                ast.parse(candidate)
            except SyntaxError:
                return
        out.append(Mutation(rel, fn, kind, lineno, old, new_line))

    for fn, func in _functions(tree):
        doc = ast.get_docstring(func) is not None
        body_nodes = func.body[1:] if doc else func.body
        for node in (n for b in body_nodes for n in ast.walk(b)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                continue
            ln = getattr(node, "lineno", None)
            if ln is None or getattr(node, "end_lineno", ln) != ln:
                continue
            line = lines[ln - 1]
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
                a, b = _char_col(line, node.left.end_col_offset or 0), _char_col(line, node.comparators[0].col_offset)
                op = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                      ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}[type(node.ops[0])]  # fmt: skip
                span = _op_span(line, a, b, op)
                if span:
                    add(fn, "flip_comparison", ln, line[: span[0]] + _FLIP[type(node.ops[0])] + line[span[1] :])
            elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
                old_op, new_op = _BINOP[type(node.op)]
                a, b = _char_col(line, node.left.end_col_offset or 0), _char_col(line, node.right.col_offset)
                span = _op_span(line, a, b, old_op)
                if span:
                    add(fn, "wrong_operator", ln, line[: span[0]] + new_op + line[span[1] :])
            elif isinstance(node, ast.BoolOp) and type(node.op) in _BOOL and len(node.values) == 2:
                old_op, new_op = _BOOL[type(node.op)]
                a, b = _char_col(line, node.values[0].end_col_offset or 0), _char_col(line, node.values[1].col_offset)
                span = _op_span(line, a, b, old_op)
                if span:
                    add(fn, "wrong_operator", ln, line[: span[0]] + new_op + line[span[1] :])
            elif (
                isinstance(node, ast.Constant)
                and type(node.value) is int
                and node.value in (0, 1, 2)
                and node.col_offset is not None
            ):
                a, b = _char_col(line, node.col_offset), _char_col(line, node.end_col_offset or 0)
                if line[a:b] == str(node.value):
                    add(fn, "off_by_one", ln, line[:a] + str(node.value + 1) + line[b:])
        for block in [body_nodes, *(getattr(n, f) for n in ast.walk(func) for f in ("body", "orelse") if n is not func and isinstance(getattr(n, f, None), list))]:  # fmt: skip
            stmts = [s for s in block if isinstance(s, ast.stmt)]
            if len(stmts) < 2:
                continue
            for s in stmts[:-1]:
                if isinstance(s, ast.Assign | ast.AugAssign | ast.Expr) and s.lineno == s.end_lineno:
                    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
                        continue
                    add(fn, "drop_statement", s.lineno, "")
    return out


def test_index(root: str | Path, test_files: list[str]) -> dict[str, set[str]]:
    """Test class node id (``file::Class``) -> identifiers its code uses (to find the tests of a function)."""
    index: dict[str, set[str]] = {}
    for rel in test_files:
        tree = ast.parse((Path(root) / rel).read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and (
                node.name.startswith("Test") or node.name.endswith(("Test", "Tests"))
            ):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
                index[f"{rel}::{node.name}"] = names
    return index


def failure_excerpt(output: str, test_id: str, max_lines: int = 12) -> str:
    """The ``E`` lines of `test_id`'s traceback in pytest ``--tb=short`` output."""
    name = test_id.split("::")[-1]
    m = re.search(r"_{3,} \S*" + re.escape(name) + r"\S* _{3,}\n(.*?)(?=\n_{3,} |\n={3,})", output, re.S)
    block = m.group(1) if m else output
    err = [ln[1:].strip() for ln in block.splitlines() if ln.startswith("E ")]
    return "\n".join(err[:max_lines])


class Generator:
    """Generate tasks from one project (see the module docstring).

    Args:
        source: Task source string (``archive:<path>`` or ``dir:<path>``); recorded in every task.
        package: Package directory to mutate, relative to the tree (e.g. ``more_itertools``).
        test_files: Test files, relative to the tree.
        backend: Sandbox running the tests (default: `LocalBackend`).
        repo: Repository name recorded in tasks.
        max_seconds: Skip functions whose test classes take longer than this on the clean tree.
        test_command: pytest command line of the tasks (default: `PYTEST` with plain asserts, which skips
            pytest's assertion rewriting of large test modules).
        environment: The tasks' environment (tests run in it here too); None: the host's Python.
    """

    def __init__(
        self,
        source: str,
        package: str,
        test_files: list[str],
        *,
        backend: Backend | None = None,
        repo: str = "",
        max_seconds: float = 20.0,
        test_command: str = PYTEST + " --assert=plain",
        environment: TaskEnvironment | None = None,
    ) -> None:
        self.test_command = test_command
        self.environment = environment
        self.source = source
        self.package = package
        self.test_files = test_files
        self.backend = backend or LocalBackend()
        self.backend.select(environment)
        self.repo = repo or package
        self.max_seconds = max_seconds
        self._tmp = tempfile.mkdtemp(prefix="envkit-swegen-")
        os.chmod(self._tmp, 0o711)
        self.clean = os.path.join(self._tmp, "clean")
        os.mkdir(self.clean)
        kind, _, rest = source.partition(":")
        if kind == "archive":
            extract_archive(Path(rest), self.clean)
        else:
            shutil.copytree(rest, self.clean, dirs_exist_ok=True)
        chown_tree(self.clean, 65534, 65534)
        self.work = os.path.join(self._tmp, "work")
        shutil.copytree(self.clean, self.work, symlinks=True)
        chown_tree(self.work, 65534, 65534)
        self.index = test_index(self.clean, test_files)
        self._baseline: dict[tuple[str, ...], dict[str, str] | None] = {}

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def mutations(self) -> list[Mutation]:
        """All mutations of the package's modules in functions that some test class mentions."""
        out: list[Mutation] = []
        for path in sorted(Path(self.clean, self.package).rglob("*.py")):
            rel = str(path.relative_to(self.clean))
            out += [m for m in find_mutations(self.clean, rel) if self.classes_for(m)]
        return out

    def classes_for(self, m: Mutation) -> tuple[str, ...]:
        """Test classes that mention the mutated function's top-level name (a class, for methods)."""
        name = m.function.split(".")[0]
        return tuple(sorted(c for c, names in self.index.items() if name in names))

    def _run(self, classes: tuple[str, ...]) -> dict[str, str] | None:
        cmd = f"{self.test_command} " + " ".join(classes)
        env = {**self.backend.base_env(), "PYTHONDONTWRITEBYTECODE": ""}  # cache byte-code of unchanged files
        r = self.backend.run(self.work, cmd, cwd=WORKDIR, env=env, timeout=self.max_seconds, output_chars=4 << 20)
        return None if r.timed_out else {**parse_pytest(r.output), "__output__": r.output}

    def try_mutation(self, m: Mutation, k: int = 0) -> SweTask | None:
        """Run the mutation's tests clean and mutated; return a task when some tests break, else None."""
        classes = self.classes_for(m)
        if not classes or len(classes) > 6:
            return None
        if classes not in self._baseline:
            self._baseline[classes] = self._run(classes)
        clean = self._baseline[classes]
        if not clean:
            return None
        target = Path(self.work, m.path)
        original = target.read_text(encoding="utf-8")
        mutated = m.apply(original)
        target.write_text(mutated, encoding="utf-8")
        try:
            broken = self._run(classes)
        finally:
            target.write_text(original, encoding="utf-8")
        if broken is None:
            return None
        ok = [t for t, s in clean.items() if s == "PASSED" and t != "__output__"]
        f2p = tuple(sorted(t for t in ok if broken.get(t) != "PASSED"))
        p2p = tuple(sorted(t for t in ok if broken.get(t) == "PASSED"))
        if not f2p:
            return None
        excerpt = failure_excerpt(broken["__output__"], f2p[0])
        func = m.function
        statement = (
            f"`{func}` in `{m.path}` does not behave as documented. "
            f"{len(f2p)} test(s) fail, for example `{f2p[0]}`"
            + (f":\n\n```\n{excerpt}\n```\n" if excerpt else ".\n")
            + f"\nFix `{func}` so that it behaves as its documentation and tests describe."
        )
        return SweTask(
            instance_id=f"{self.repo}__{func}__{m.kind}__{m.line}" + (f"_{k}" if k else ""),
            repo=self.repo,
            problem_statement=statement,
            fail_to_pass=f2p,
            pass_to_pass=p2p,
            patch=unified_diff(m.path, mutated, original),
            source=self.source,
            bug_patch=unified_diff(m.path, original, mutated),
            test_command=self.test_command,
            metadata={"kind": m.kind, "function": func, "path": m.path, "line": m.line},
            environment=self.environment,
        )

    def generate(self, n: int, *, seed: int = 0, max_tries: int | None = None, progress: bool = False) -> list[SweTask]:
        """Up to `n` tasks from shuffled mutations, at most one per (function, kind)."""
        muts = self.mutations()
        random.Random(seed).shuffle(muts)
        tasks: list[SweTask] = []
        used: set[tuple[str, str]] = set()
        tries = 0
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=n, desc="tasks")
        for m in muts:
            if len(tasks) >= n or (max_tries is not None and tries >= max_tries):
                break
            if (m.function, m.kind) in used:
                continue
            tries += 1
            task = self.try_mutation(m)
            if task is not None:
                used.add((m.function, m.kind))
                tasks.append(task)
                if bar is not None:
                    bar.update(1)
        if bar is not None:
            bar.close()
        return tasks
