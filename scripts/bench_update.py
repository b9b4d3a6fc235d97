"""The local trainer's update on long multi-turn rows: unpadded row-by-row forwards vs the padded shared-prompt batch.

Rows shaped like the README's WebShop + SERO step (2 groups x 4 episodes + 2 oracle rows: a 200-token first prompt
shared by each group, then ~3,300 tokens of actions and observations with ~8% of them actions in the loss) go
through one `envkit.trainers.local.update.update` of the `tiny:bytes` model (0.82M parameters), once per way of
computing the forward (`envkit.trainers.local.shared_prefix.LONG_ROW_TOKENS`): `padded` (every row in the
shared-prompt batch with an attention mask, what the trainer did before) and `unpadded` (rows of at least
LONG_ROW_TOKENS tokens alone, the default). A short-row case (single-turn arithmetic shape: 16 prompts x 8 rows of
~20 tokens) shows the threshold leaves short rows on the batched path. Each arm runs in its own process, so its
peak RSS is its own; CPU seconds (user + sys) are the stable number on a shared machine. The updated parameters
are compared across arms (the same update up to float rounding).

Prints one JSON object with per-arm CPU seconds, wall seconds, peak RSS, and the ratios padded / unpadded.

    python scripts/bench_update.py                 # ~1-2 CPU min
    python scripts/bench_update.py --cases long --response-tokens 700 --long-row-tokens 0   # where is the crossover?
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def arm(kind: str, args: argparse.Namespace) -> dict[str, float]:
    """Run one update in this process (the child's side); returns its measurements."""
    import numpy as np
    import torch

    from envkit.runtime.models import ModelConfig, load_model
    from envkit.trainers.local import shared_prefix
    from envkit.trainers.local.options import LossConfig
    from envkit.trainers.local.update import TrainBatch, update

    torch.set_num_threads(1)
    if kind == "padded":
        shared_prefix.LONG_ROW_TOKENS = 10**9
    elif args.long_row_tokens is not None:
        shared_prefix.LONG_ROW_TOKENS = args.long_row_tokens
    model, tok = load_model(ModelConfig(path="tiny:bytes", device="cpu"))
    model.train()
    rng = np.random.default_rng(0)
    if args.case == "long":
        n, plen, rlen, share = args.rows, 200, args.response_tokens, 0.08
        prompts = [rng.integers(3, 250, plen).tolist() for _ in range(2)]
        rows_prompt = [prompts[i * 2 // n] for i in range(n)]
    else:
        n, plen, rlen, share = 128, 12, 8, 1.0
        prompts = [rng.integers(3, 250, plen).tolist() for _ in range(16)]
        rows_prompt = [prompts[i // 8] for i in range(n)]
    responses = [rng.integers(3, 250, int(rlen * rng.uniform(0.85, 1.0))).tolist() for _ in range(n)]
    flags = [(rng.random(len(r)) < share).astype(int).tolist() for r in responses]
    batch = TrainBatch(
        prompts=rows_prompt, responses=responses, loss_flags=flags,
        advantages=[[float(rng.normal())] * len(r) for r in responses], weights=[1.0] * n,
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    c0, t0 = time.process_time(), time.perf_counter()
    update(model, opt, batch, LossConfig(), tok.pad_token_id)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.save(params, args.params_out)
    return {
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "tokens": sum(len(p) + len(r) for p, r in zip(rows_prompt, responses, strict=True)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10, help="long case: rows in the batch")
    ap.add_argument("--response-tokens", type=int, default=3500, help="long case: tokens after the first prompt")
    ap.add_argument("--long-row-tokens", type=int, help="the unpadded arm's threshold (default: the trainer's)")
    ap.add_argument("--cases", nargs="+", default=["long", "short"], choices=["long", "short"])
    ap.add_argument("--arm", choices=["padded", "unpadded"], help=argparse.SUPPRESS)
    ap.add_argument("--case", choices=["long", "short"], help=argparse.SUPPRESS)
    ap.add_argument("--params-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:  # the child
        print(json.dumps(arm(args.arm, args)))
        return
    import tempfile
    from pathlib import Path

    import torch

    from envkit.trainers.local.shared_prefix import LONG_ROW_TOKENS

    threshold = LONG_ROW_TOKENS if args.long_row_tokens is None else args.long_row_tokens
    out: dict[str, object] = {"long_row_tokens": threshold}
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            res: dict[str, dict[str, float]] = {}
            for kind in ("padded", "unpadded"):
                params = str(Path(tmp) / f"{case}_{kind}.pt")
                cmd = [sys.executable, __file__, "--arm", kind, "--case", case, "--params-out", params,
                       "--rows", str(args.rows), "--response-tokens", str(args.response_tokens),
                       *(["--long-row-tokens", str(args.long_row_tokens)] if args.long_row_tokens is not None else [])]  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
                res[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
            a, b = (torch.load(str(Path(tmp) / f"{case}_{k}.pt")) for k in ("padded", "unpadded"))
            out[case] = {
                **res,
                "cpu_ratio_padded_over_unpadded": round(
                    res["padded"]["cpu_s"] / max(res["unpadded"]["cpu_s"], 1e-3), 2
                ),
                "rss_ratio_padded_over_unpadded": round(
                    res["padded"]["peak_rss_mb"] / max(res["unpadded"]["peak_rss_mb"], 1), 2
                ),
                "params_max_abs_diff": float((a - b).abs().max()),
            }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
