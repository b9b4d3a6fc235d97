"""Run real ``train_ppo_ray`` iterations through ``envkit-train openrlhf`` and summarise what happened (JSON).

Each arm starts the real command line (``python -m envkit.trainers.cli openrlhf [--cpu] ... -- <OpenRLHF flags>``)
on a tiny random Llama (byte tokenizer, ~0.5M parameters, saved locally: no download), then reads the run's own
outputs: OpenRLHF's per-step status lines (``Global step N: {...}``), envkit's weight-check log
(``envkit_weight_sync.jsonl``: per-tensor checksums of actor vs engine after every broadcast, probe log-probs),
the credit log of the SERO and branching arms (``envkit_credit.jsonl``, ``--credit-log``: one group per step recomputed with the local
trainer's credit by scripts/openrlhf_credit_check.py, value by value) and the checkpoint folder. Peak memory: the largest sums of RSS and of PSS over the run's process tree (sampled every second).

    python scripts/openrlhf_e2e.py --arm grpo_math --out runs/openrlhf_e2e            # CPU (adds --cpu)
    python scripts/openrlhf_e2e.py --arm grpo_math --device cuda --out "$OUT/e2e"      # one GPU

Arms: ``grpo_math`` (GRPO on envkit/Math-v0, 2 iterations, checkpoint every step, then a resumed run for one more
iteration), ``gigpo_sero_toy`` (GraphGPO + SERO on envkit/Toy-v0), ``eden_math`` (EDEN prompt-embeds rows),
``branch_toy`` (branching rollouts). Prints one JSON object per arm (also written to ``OUT/ARM/summary.json``).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def tiny_llama(out: Path) -> Path:
    """A randomly initialised 2-layer Llama over envkit's byte tokenizer, saved as a transformers folder."""
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from envkit.runtime.models import byte_tokenizer

    tok = byte_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=1024, tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


ARMS: dict[str, dict[str, Any]] = {
    "grpo_math": {
        "ours": ["--explorer", "none", "--advantage", "grpo", "--env", "envkit/Math-v0"],
        "prompt": "Q: {obs}\nA:",
        "n": 4,
        "resume": True,
    },
    "gigpo_sero_toy": {  # --credit-log: one group per step, recomputed with the local trainer's credit (CREDIT_ARMS)
        "ours": [
            "--advantage",
            "graphgpo",
            "--sero",
            "--env",
            "envkit/Toy-v0",
            "--max-turns",
            "6",
            "--credit-log",
            "--adv.terminal-reward",
            "10",
        ],
        "prompt": "Move to the goal. {obs}\nAction:",
        "n": 4,
        "max_len": 1024,  # byte tokens: a Toy observation is ~100 tokens a turn
        "new_tokens": 8,
    },
    "eden_math": {
        "ours": ["--explorer", "eden", "--advantage", "grpo", "--env", "envkit/Math-v0", "--eden-anchors", "60,70,80"],
        "prompt": "Q: {obs}\nA:",
        "n": 4,
    },
    "branch_toy": {
        # --credit-log: one group of backbones and forks per step, checked like the SERO arm's; --adv.terminal-reward
        # unset (the SERO arm sets it): both trainers credit 10 x success, resolved per run
        "ours": [
            "--explorer",
            "branch",
            "--advantage",
            "graphgpo",
            "--env",
            "envkit/Toy-v0",
            "--max-turns",
            "4",
            "--credit-log",
        ],
        "prompt": "Move to the goal. {obs}\nAction:",
        "n": 4,
        "max_len": 1024,  # byte tokens: a Toy observation is ~100 tokens a turn
        "new_tokens": 8,
    },
}


def openrlhf_flags(
    model: Path,
    data: Path,
    ckpt: Path,
    n: int,
    device: str,
    steps_prompts: int,
    max_len: int = 256,
    new_tokens: int = 24,
) -> list[str]:
    flags = [
        "--actor.model_name_or_path", str(model), "--data.prompt_dataset", str(data), "--data.input_key", "input",
        "--data.label_key", "label", "--data.max_len", str(max_len), "--rollout.max_new_tokens", str(new_tokens),
        "--rollout.batch_size", "2", "--rollout.n_samples_per_prompt", str(n), "--rollout.micro_batch_size", "4",
        "--train.batch_size", str(2 * n), "--train.micro_batch_size", "4", "--train.num_episodes", "1",
        "--data.max_samples", str(steps_prompts), "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1",
        "--ref.num_gpus_per_node", "1", "--vllm.num_engines", "1", "--vllm.tensor_parallel_size", "1",
        "--train.colocate_all", "--vllm.enforce_eager", "--vllm.gpu_memory_utilization", "0.3",
        "--ds.zero_stage", "2", "--ds.param_dtype", "bf16", "--actor.adam.lr", "1e-3", "--actor.lr_warmup_ratio", "0",
        "--actor.entropy_coef", "0.01", "--algo.kl.use_loss", "--algo.kl.init_coef", "0.01",
        "--algo.kl.estimator", "k3", "--ckpt.output_dir", str(ckpt), "--ckpt.path", str(ckpt / "ds"),
        "--ckpt.save_steps", "1", "--logger.logging_steps", "1", "--train.seed", "0",
    ]  # fmt: skip
    if device == "cpu":
        flags += ["--ds.attn_implementation", "eager"]
    return flags


def write_tasks(path: Path, prompt: str, count: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for seed in range(count):
            f.write(json.dumps({"input": prompt, "label": json.dumps({"seed": seed})}) + "\n")
    return path


def _tree_memory(pid: int) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) over the process tree of ``pid`` (PSS splits shared pages such as torch's
    libraries between the processes that map them; RSS counts them in each)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    rss = pss = 0
    for p in procs:
        try:
            info = p.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
        except psutil.Error:
            pass
    return rss, pss


#: The launched run in progress (its own session): killed with this script on SIGTERM / SIGINT (`main`).
_RUNNING: list[subprocess.Popen[bytes]] = []


def _stop_running(signum: int, _frame: Any) -> None:
    for proc in _RUNNING:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raise SystemExit(128 + signum)


def launch(cmd: list[str], log: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run ``cmd`` with output to ``log``; returns rc, wall seconds, peak tree RSS and PSS (GiB)."""
    peak = [0, 0]
    t = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
        _RUNNING.append(proc)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(1.0):
                rss, pss = _tree_memory(proc.pid)
                peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

        threading.Thread(target=sample, daemon=True).start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            rc = -9
        done.set()
        _RUNNING.remove(proc)
    gib = 2**30
    return {
        "rc": rc, "wall_s": round(time.perf_counter() - t, 1), "peak_rss_sum_gib": round(peak[0] / gib, 2),
        "peak_pss_gib": round(peak[1] / gib, 2),
    }  # fmt: skip


_STEP = re.compile(r"Global step (\d+): (\{.*\})")


def parse_steps(text: str) -> list[dict[str, Any]]:
    """OpenRLHF's per-step status dicts (``Global step N: {...}``), in order."""
    steps = []
    for m in _STEP.finditer(text):
        try:
            status = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            continue
        steps.append({"step": int(m.group(1)), **{k: v for k, v in status.items() if isinstance(v, (int, float))}})
    return steps


def read_syncs(ckpt: Path) -> list[dict[str, Any]]:
    path = ckpt / "envkit_weight_sync.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_arm(arm: str, out: Path, device: str, timeout: float, iterations: int = 2) -> dict[str, Any]:
    spec = ARMS[arm]
    work = out / arm
    work.mkdir(parents=True, exist_ok=True)
    (work / "summary.json").unlink(missing_ok=True)  # a reader polls for this run's
    model = tiny_llama(out / "tiny_llama")
    n = int(spec["n"])
    data = write_tasks(work / "tasks.jsonl", spec["prompt"], 64)
    ckpt = work / "ckpt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["ENVKIT_RAY_TMPDIR"] = str(
        Path(os.environ.get("ENVKIT_RAY_TMPDIR_ROOT", "/tmp")) / f"ekray-{arm}-{os.getpid()}"
    )
    cpu = ["--cpu"] if device == "cpu" else []
    base = [sys.executable, "-m", "envkit.trainers.cli", "openrlhf", *cpu, *spec["ours"], "--"]
    sizes = {"max_len": int(spec.get("max_len", 256)), "new_tokens": int(spec.get("new_tokens", 24))}
    flags = openrlhf_flags(model, data, ckpt, n, device, steps_prompts=2 * iterations, **sizes)
    summary: dict[str, Any] = {"arm": arm, "device": device, "command": " ".join(base[3:] + flags)}
    first = launch([*base, *flags], work / "run.log", env, timeout)
    text = (work / "run.log").read_text(errors="replace")
    summary["run"] = {**first, "steps": parse_steps(text), "syncs": read_syncs(ckpt)}
    summary["run"]["cpu_shim_lines"] = sum("[envkit cpu-shim" in line for line in text.splitlines())
    credit_log = ckpt / "envkit_credit.jsonl"
    if credit_log.exists():  # --credit-log: the logged groups against the local trainer's credit
        summary["run"]["credit"] = _credit_checker().check_file(credit_log)
    summary["checkpoints"] = sorted(p.name for p in (ckpt / "ds").glob("*")) if (ckpt / "ds").exists() else []
    if spec.get("resume") and first["rc"] == 0:
        flags2 = openrlhf_flags(model, data, ckpt, n, device, steps_prompts=2 * (iterations + 1), **sizes)
        flags2 += ["--ckpt.load_enable"]
        n_syncs = len(summary["run"]["syncs"])
        second = launch([*base, *flags2], work / "resume.log", env, timeout)
        text2 = (work / "resume.log").read_text(errors="replace")
        summary["resume"] = {**second, "steps": parse_steps(text2), "syncs": read_syncs(ckpt)[n_syncs:]}
    part = work / "summary.json.part"  # written whole, then renamed: a reader polling for it never sees half
    part.write_text(json.dumps(summary, indent=1))
    part.replace(work / "summary.json")
    return summary


#: Arms whose credit log (``--credit-log``) must match the local trainer's credit: oracle turns (SERO) and forks
#: with a prefix shared with their backbone (branching) included.
CREDIT_ARMS = ("gigpo_sero_toy", "branch_toy")


def _credit_checker() -> Any:
    """scripts/openrlhf_credit_check.py as a module (this script is loaded from its path too)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "openrlhf_credit_check", Path(__file__).with_name("openrlhf_credit_check.py")
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: Per-arm evidence that the arm's method reached the update (OpenRLHF status keys that must be > 0 in some step).
ARM_KEYS = {
    "gigpo_sero_toy": ("envkit/sero_oracle_share",),
    "eden_math": ("envkit/eden_noisy_share",),
    "branch_toy": ("envkit/branch_forks",),
}


def problems(summary: dict[str, Any], iterations: int = 2) -> list[str]:
    """What the arm's outputs violate (empty: every check of the module doc holds)."""
    out: list[str] = []
    for part in ("run", "resume"):
        run = summary.get(part)
        if run is None:
            continue
        if run["rc"] != 0:
            out.append(f"{part}: rc {run['rc']}")
            continue
        steps = run["steps"]
        want = iterations if part == "run" else 1
        if len(steps) < want:
            out.append(f"{part}: {len(steps)} steps < {want}")
        for st in steps:
            for key in ("policy_loss", "kl"):
                if not isinstance(st.get(key), (int, float)) or not math.isfinite(st[key]):
                    out.append(f"{part} step {st['step']}: {key} {st.get(key)!r} is not finite")
        syncs = [e for e in run["syncs"] if e["event"] == "sync"]
        if len(syncs) < want:
            out.append(f"{part}: {len(syncs)} weight checks < {want}")
        start = next((e for e in run["syncs"] if e["event"] == "start"), None)
        version = 0
        probes = [start["probe_logprob"]] if start else []
        for e in syncs:
            if not e["engine_equal"]:
                out.append(f"{part} sync {e['sync']}: engine weights differ from the actor's")
            if e["engine_versions"][0] <= version:
                out.append(f"{part} sync {e['sync']}: engine weight version did not move ({e['engine_versions']})")
            version = e["engine_versions"][0]
            actor, engine = e["actor_probe_logprob"], e["engine_probe_logprob"][0]
            if abs(engine - actor) > 0.05 * abs(actor):
                out.append(f"{part} sync {e['sync']}: probe log-prob engine {engine} vs actor {actor}")
            probes.append(actor)
        trained = syncs if part == "run" else syncs[1:]  # a resumed run's first broadcast restores, not trains
        for e in trained:
            if not e["changed_since_last"]:
                out.append(f"{part} sync {e['sync']}: the update changed no actor tensor")
        moved = probes if part == "run" else probes[1:]
        if any(a == b for a, b in itertools.pairwise(moved)):
            out.append(f"{part}: the probe log-prob did not move with every update: {moved}")
    for key in ARM_KEYS.get(summary["arm"], ()):
        if not any(st.get(key, 0) > 0 for st in summary["run"]["steps"]):
            out.append(f"{key} never > 0: the arm's rows did not reach the update")
    if summary["arm"] in CREDIT_ARMS and summary["run"]["rc"] == 0:
        credit = summary["run"].get("credit")
        if credit is None or credit["entries"] < iterations:
            out.append(f"credit log: {credit and credit['entries']} entries < {iterations} (--credit-log wrote none?)")
        else:
            out += [f"credit: {p}" for p in credit["problems"]]
            if summary["arm"] == "gigpo_sero_toy" and not credit["oracle_turns"]:
                out.append("credit log: no oracle turn in the logged groups: SERO's rows were not compared")
            if summary["arm"] == "branch_toy" and not credit["forks"]:
                out.append("credit log: no fork in the logged groups: the branch credit was not compared")
    resumed = summary.get("resume")
    if resumed is not None and resumed["rc"] == 0:
        last = [e for e in summary["run"]["syncs"] if e["event"] == "sync"][-1]
        start = next((e for e in resumed["syncs"] if e["event"] == "start"), {})
        if start.get("actor_digest") != last["actor_digest"]:
            out.append("resume: the restored weights are not the trained ones (digest differs)")
        if [st["step"] for st in resumed["steps"]] != [iterations + 1]:
            out.append(f"resume: steps {[st['step'] for st in resumed['steps']]}, expected [{iterations + 1}]")
    return out


class Background:
    """The given arms run one after another by ONE background process of this script (its own session), so that they
    overlap other work (the test suite: on 2 cores it keeps about one busy); `summary` waits for one arm's.

    Used by tests/trainers/openrlhf/conftest.py, which starts it as soon as pytest has collected the selected arms.
    """

    def __init__(self, arms: list[str], out: Path, ray_root: Path, timeout: float = 1500.0) -> None:
        self.arms, self.out, self.ray_root, self.log = list(arms), out, ray_root, out / "background.log"
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--timeout", str(timeout)]
        for arm in self.arms:
            cmd += ["--arm", arm]
        env = {**os.environ, "ENVKIT_RAY_TMPDIR_ROOT": str(ray_root)}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
            )

    def summary(self, arm: str, timeout: float) -> dict[str, Any]:
        """The arm's summary once written; raises RuntimeError if the process ended without it or ``timeout``
        seconds passed."""
        if arm not in self.arms:
            raise ValueError(f"arm {arm!r} is not one of the background arms {self.arms}")
        path = self.out / arm / "summary.json"
        deadline = time.monotonic() + timeout
        while not path.exists():
            rc = self.proc.poll()
            if rc is not None and not path.exists():
                raise RuntimeError(
                    f"the background end-to-end run ended (rc {rc}) without {arm}'s summary: see {self.log} and "
                    f"{self.out / arm}/run.log"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"no summary of {arm} after {timeout:.0f} s: see {self.log}")
            time.sleep(1.0)
        return json.loads(path.read_text())

    def stop(self) -> None:
        """Stop the process (and the run it launched) if it still runs."""
        if self.proc.poll() is None:
            self.proc.terminate()  # its handler kills the launched run's session
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", action="append", choices=sorted(ARMS), help="arm(s) to run (default: grpo_math)")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "openrlhf_e2e")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--timeout", type=float, default=1500.0, help="seconds per launched run")
    ap.add_argument("--check", type=Path, help="only check the summaries (JSON lines) in this file")
    args = ap.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):  # the launched run lives in its own session: stop it with us
        signal.signal(sig, _stop_running)
    if args.check:
        summaries = [json.loads(line) for line in args.check.read_text().splitlines() if line.startswith("{")]
    else:
        summaries = []
        for arm in args.arm or ["grpo_math"]:
            summaries.append(run_arm(arm, args.out, args.device, args.timeout))
            print(json.dumps(summaries[-1]), flush=True)
    bad = {s["arm"]: problems(s) for s in summaries}
    for arm, found in bad.items():
        print(f"{arm}: {'ok' if not found else 'FAILED: ' + '; '.join(found)}", file=sys.stderr)
    return 0 if summaries and not any(bad.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
