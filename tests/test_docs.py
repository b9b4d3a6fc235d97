"""The docs are executed: every fenced ``bash`` and ``python`` block of README.md and docs/*.md runs as written.

Each block is one test (``tests/test_docs.py::test_doc_block[docs/oracle.md:154]``), run the way a new user runs
it: in a fresh folder (the checkout's ``scripts/`` linked in, so ``python scripts/...`` works), ``bash`` blocks as
one ``bash -e`` script (a command's failure fails the block), ``python`` blocks as a script file (``__main__``,
so a pool that spawns workers re-imports it as a user's script would), with the venv's console scripts on PATH.

A block that cannot run here says so in the doc, in an HTML comment on the line before its fence (invisible on
GitHub)::

    <!-- doc-test: slow -->                        runs only with -m slow (CI runs it): training commands
    <!-- doc-test: skip gpu: needs 8 GPUs -->     marked gpu (never in CI), skipped with the reason
    <!-- doc-test: skip: runs for hours -->       marked manual (skipped in CI too), with the reason
    <!-- doc-test: interop -->                     python block: runs in the interop venv (gem, skyrl, trl)
    <!-- doc-test: continues -->                   python block: runs after the file's previous python block
    <!-- doc-test: needs alfworld -->              needs $ALFWORLD_DATA (skips as the other ALFWorld tests do)

Tags combine with ``,`` (``slow, needs alfworld``); ``skip`` comes last (its reason may hold commas). Every training command in a runnable block caps its own
length (``--steps N``): a block is run as written, never rewritten. Cost in the default run (fast blocks only) and
in CI (slow blocks too): docs/install.md, "Executed docs".
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TAG = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\w+)?\s*$")
KNOWN = ("slow", "skip", "interop", "continues", "needs")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    tags: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    def tag(self, key: str) -> str | None:
        """The value of tag `key` (``""`` when it has none), or None when the block lacks it."""
        for t in self.tags:
            head, _, rest = t.partition(" ") if key != "skip" else (t[:4], "", t[4:])
            if head == key:
                return rest.lstrip(" :").strip()
        return None


def _split_tags(text: str) -> tuple[str, ...]:
    """``"slow, skip: a reason, with commas"`` -> ``("slow", "skip: a reason, with commas")`` (skip comes last)."""
    head, sep, reason = text.partition("skip")
    tags = [x.strip() for x in head.split(",") if x.strip()]
    return (*tags, sep + reason) if sep else tuple(tags)


def doc_blocks(paths: list[Path] = DOCS) -> list[Block]:
    """The ``bash`` and ``python`` blocks of `paths` with their ``doc-test`` tags (unknown tags raise)."""
    out: list[Block] = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            lang = m.group(1) or ""
            if lang in ("bash", "python"):
                t = TAG.match(lines[i - 1]) if i else None
                tags = _split_tags(t.group(1)) if t else ()
                for x in tags:
                    if not x.startswith(KNOWN):
                        raise ValueError(f"{path.name}:{i}: unknown doc-test tag {x!r}; known: {', '.join(KNOWN)}")
                out.append(Block(path, i + 1, lang, "\n".join(lines[i + 1 : j]) + "\n", tags))
            i = j + 1
    return out


BLOCKS = doc_blocks()


def _params() -> list[object]:
    params = []
    for b in BLOCKS:
        marks = []
        if b.tag("slow") is not None:
            marks.append(pytest.mark.slow)
        skip = b.tag("skip")
        if skip is not None:
            gpu = skip.startswith("gpu")
            marks += [pytest.mark.gpu if gpu else pytest.mark.manual, pytest.mark.skip(reason=f"{b.name}: {skip}")]
        params.append(pytest.param(b, id=b.name, marks=marks))
    return params


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("ENVKIT_INTEROP_VENV", str(REPO / ".venv-interop"))
    env["OMP_NUM_THREADS"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    env["MPLBACKEND"] = "Agg"
    return env


def _workdir(tmp: Path) -> Path:
    work = tmp / "user"
    work.mkdir()
    (work / "scripts").symlink_to(REPO / "scripts")
    return work


def run_block(block: Block, tmp: Path, *, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run `block` as a user would (see the module docstring); returns the finished process."""
    work = _workdir(tmp)
    env = _env(tmp)
    if block.lang == "bash":
        cmd = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    else:
        code = block.code
        if block.tag("continues") is not None:
            before = [b for b in BLOCKS if b.path == block.path and b.lang == "python" and b.line < block.line]
            if not before:
                raise ValueError(f"{block.name} is tagged 'continues' but no python block comes before it")
            code = before[-1].code + code
        script = work / "snippet.py"
        script.write_text(code)
        py = sys.executable
        if block.tag("interop") is not None:
            py = str(Path(env["ENVKIT_INTEROP_VENV"]) / "bin" / "python")
            if not Path(py).exists():
                pytest.skip(f"the interop venv {Path(py).parents[1]} is missing: bash .ci/install.d/40-interop.sh")
        cmd = [py, str(script)]
    # its own process group: a block that runs past the cap is stopped with everything it started (servers, workers)
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n[doc-test] stopped after {timeout:.0f} s: tag the block slow, or cap it (--steps)"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what the block left running in the background
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("block", _params())
def test_doc_block(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    needs = block.tag("needs")
    if needs:
        os.environ.setdefault(f"{needs.upper()}_DATA", str(request.getfixturevalue(f"{needs}_data")))
    proc = run_block(block, tmp_path)
    assert proc.returncode == 0, (
        f"{block.name} ({block.lang}) failed as written, exit {proc.returncode}:\n{block.code}\n"
        f"--- stdout (tail)\n{proc.stdout[-3000:]}\n--- stderr (tail)\n{proc.stderr[-3000:]}"
    )


def test_every_block_is_found_and_tagged_knowingly() -> None:
    """The collector sees the docs' blocks (a renamed fence language would drop them silently)."""
    assert len(BLOCKS) >= 30, [b.name for b in BLOCKS]
    assert {b.lang for b in BLOCKS} == {"bash", "python"}
    with pytest.raises(ValueError, match="unknown doc-test tag 'fast'"):
        p = Path(os.environ.get("TMPDIR", "/tmp")) / f"doc_tag_probe_{os.getpid()}.md"
        p.write_text("<!-- doc-test: fast -->\n```bash\ntrue\n```\n")
        try:
            doc_blocks([p])
        finally:
            p.unlink()


@pytest.mark.slow  # ~25 CPU s: CI runs it, the default run does not
def test_readme_learning_command(tmp_path: Path) -> None:
    """The README's first training command learns: its first 8 steps (the block as written, ``--steps 60`` -> 8)
    raise the policy's log-likelihood of the oracle's first action (README: -5.70 at step 1, -3.62 at step 10).

    Cost: ~15-20 s of CPU (8 steps of a 64-wide 2-layer model on Toy-v0 with SERO, plus start-up).
    """
    import itertools
    import json

    block = next(b for b in BLOCKS if b.path.name == "README.md" and "--task envkit/Toy-v0" in b.code)
    assert "--steps 60" in block.code, "the README's learning command changed its length: update this test"
    capped = Block(block.path, block.line, block.lang, block.code.replace("--steps 60", "--steps 8"), ())
    proc = run_block(capped, tmp_path, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    records = [json.loads(x) for x in (tmp_path / "user/runs/toy_sero/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 9))
    first = [r["sero_first_loglik"] for r in records]
    assert all(r["sero_rescues"] > 0 for r in records), records  # every step has oracle rows to learn from
    assert first[0] == pytest.approx(-5.70, abs=0.3), first  # the README's starting point (seed 0)
    assert first[-1] > first[0] + 1.0, first  # it learns: ~-4.2 at step 8
    assert all(b > a for a, b in itertools.pairwise(first)), first  # every step, not by chance
