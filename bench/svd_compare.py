"""MeCeFO's SVD refresh: the full SVD against the randomized range finder, on the CPU.

Two MeCeFO runs of the harness that differ only in `method.svd` (full | randomized): the same
model, seed, corpus and failure (3 workers; worker 1 fails at step 0 and stays down, so worker
2 covers it on every step and the projections are refreshed every `--svd-every` steps). Reported:
  1. the loss curves of the two runs side by side, and their final validation loss;
  2. the harness's own gradient-error rows (||g_hat - g|| / ||g|| of the FFN parameters, every
     `--grad-error-every` degraded steps) of each run;
  3. on the FFN weights at initialisation and at the end of the full-SVD run: the principal
     angles between the two top-r subspaces, and the relative error of the low-rank weight
     gradient G V Vᵀ against the exact G of a held-out micro-batch, with V from each SVD (and
     from a random orthonormal basis, for scale); the seconds of each decomposition on this CPU,
     as a ratio of randomized to full.

    python bench/svd_compare.py                                  # llama_60m, 40 steps, rank 64
    python bench/svd_compare.py --only full --out full.json &    # the two runs as two processes,
    python bench/svd_compare.py --only randomized --out rand.json; wait
    python bench/svd_compare.py --combine full.json rand.json    # then side by side
    python bench/svd_compare.py --model llama_tiny --steps 6 --svd-every 2 --seq-len 64   # smoke
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402


def run_once(args, svd, trace, run_dir):
    from overhead import compose_cfg

    from mecefo_exp.run.experiment import Experiment

    cfg = compose_cfg(
        [
            f"model={args.model}",
            "method=mecefo",
            f"method.svd={svd}",
            f"method.rank={args.rank}",
            f"method.svd_every={args.svd_every}",
            f"method.grad_error_every={args.grad_error_every}",
            f"method.svd_oversample={args.oversample}",
            f"method.svd_power_iters={args.power_iters}",
            "failure=trace",
            f"failure.path={trace}",
            "cluster.n_workers=3",
            f"data.micro_batch={args.micro_batch}",
            f"data.seq_len={args.seq_len}",
            f"trainer.max_steps={args.steps}",
            f"trainer.eval_every={args.steps}",
            f"data.eval_blocks={args.eval_blocks}",
            "trainer.progress=none",
            "trainer.log_every=1",
            f"trainer.threads={args.threads}",
            f"seed={args.seed}",
            *args.extra,
        ]
    )
    exp = Experiment(cfg, run_dir)
    summary = exp.run()  # summary.json's content
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    losses = {r["step"]: r["loss"] for r in rows if r.get("loss") is not None}
    errors = (
        [json.loads(line) for line in open(run_dir / "grad_error.jsonl")]
        if (run_dir / "grad_error.jsonl").exists()
        else []
    )
    return exp, summary, losses, errors


def principal_angles_deg(a, b):
    """Principal angles (degrees) between the column spaces of two orthonormal n x r matrices."""
    cos = torch.linalg.svdvals(a.t() @ b).clamp(max=1.0)
    return torch.rad2deg(torch.arccos(cos))


def subspace_table(model, batch, args, label):
    """Per FFN weight: angles, gradient errors of G V Vᵀ with each V, seconds of each decomposition."""
    from mecefo_exp.numerics.projections import LowRankProjections, top_right_singular_vectors

    model.zero_grad(set_to_none=True)
    logits = model(input_ids=batch[:, :-1]).logits
    torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).backward()
    proj = LowRankProjections(model, args.rank, 1)
    gen = torch.Generator().manual_seed(1)
    out = {
        "max_angle": [],
        "mean_cos2": [],
        "err_full": [],
        "err_rand": [],
        "err_random_basis": [],
        "s_full": [],
        "s_rand": [],
    }
    for i, lin in enumerate(proj.linears()):
        w, g = lin.weight.detach(), lin.weight.grad.detach()
        t0 = time.perf_counter()
        vf = top_right_singular_vectors(w, args.rank, "full")
        t1 = time.perf_counter()
        vr = top_right_singular_vectors(w, args.rank, "randomized", args.oversample, args.power_iters, seed=i)
        t2 = time.perf_counter()
        vb, _ = torch.linalg.qr(torch.randn(w.shape[1], vf.shape[1], generator=gen))
        ang = principal_angles_deg(vf, vr)
        out["max_angle"].append(ang.max().item())
        out["mean_cos2"].append(torch.cos(torch.deg2rad(ang)).pow(2).mean().item())
        for key, v in (("err_full", vf), ("err_rand", vr), ("err_random_basis", vb)):
            out[key].append(((g - g @ v @ v.t()).norm() / g.norm()).item())
        out["s_full"].append(t1 - t0)
        out["s_rand"].append(t2 - t1)
    model.zero_grad(set_to_none=True)
    n = len(out["max_angle"])
    print(
        f"{label}: {n} FFN weights, rank {args.rank}, oversampling {args.oversample}, {args.power_iters} power "
        f"iterations"
    )
    print(
        f"  principal angles full vs randomized: largest {max(out['max_angle']):.1f} deg (median over weights "
        f"{statistics.median(out['max_angle']):.1f}), mean cos^2 {statistics.mean(out['mean_cos2']):.4f}"
    )
    for key, name in (("err_full", "full SVD"), ("err_rand", "randomized"), ("err_random_basis", "random basis")):
        print(
            f"  ||G - G V Vᵀ|| / ||G||, V from {name:<12}: mean {statistics.mean(out[key]):.4f}, "
            f"max {max(out[key]):.4f}"
        )
    ratio = sum(out["s_rand"]) / sum(out["s_full"])
    print(
        f"  seconds on this CPU: full {sum(out['s_full']):.3f}, randomized {sum(out['s_rand']):.3f} "
        f"(randomized / full {ratio:.2f})"
    )
    return out


def compare(runs):
    """The two runs' loss curves and gradient-error rows side by side."""
    lf = {int(k): v for k, v in runs["full"]["losses"].items()}
    lr = {int(k): v for k, v in runs["randomized"]["losses"].items()}
    steps = sorted(set(lf) & set(lr))
    diffs = [abs(lf[s] - lr[s]) for s in steps]
    print(
        f"loss curves over {len(steps)} steps: largest |full - randomized| {max(diffs):.4f}, mean "
        f"{statistics.mean(diffs):.4f}; final validation loss full {runs['full']['final_val_loss']:.4f}, "
        f"randomized {runs['randomized']['final_val_loss']:.4f}"
    )
    shown = sorted(set(steps[:: max(1, len(steps) // 8)]) | {steps[-1]})
    print("  step  " + " ".join(f"{s:>7}" for s in shown))
    print("  full  " + " ".join(f"{lf[s]:>7.4f}" for s in shown))
    print("  rand  " + " ".join(f"{lr[s]:>7.4f}" for s in shown))
    for name in ("full", "randomized"):
        rows = runs[name]["grad_error"]
        vals = [r["rel_error_ffn"] for r in rows if r.get("rel_error_ffn") is not None]
        if vals:
            print(
                f"harness gradient error ||g_hat - g|| / ||g||, {name}: {len(vals)} checks; FFN parameters mean "
                f"{statistics.mean(vals):.4f}, max {max(vals):.4f}; all parameters mean "
                f"{statistics.mean(r['rel_error'] for r in rows):.4f}"
            )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama_60m")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--oversample", type=int, default=8)
    ap.add_argument("--power-iters", type=int, default=2)
    ap.add_argument("--svd-every", type=int, default=10)
    ap.add_argument("--grad-error-every", type=int, default=5)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--eval-blocks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    ap.add_argument(
        "--only",
        choices=["full", "randomized"],
        default=None,
        help="one of the two runs (the subspace tables come with the full one)",
    )
    ap.add_argument(
        "--combine",
        nargs=2,
        type=Path,
        default=None,
        metavar=("FULL", "RANDOMIZED"),
        help="print the comparison of two --only runs' JSON files",
    )
    ap.add_argument("extra", nargs="*", help="more run.py overrides, e.g. data.sources=[...]")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"# bench/svd_compare.py: model {args.model}, {args.steps} steps, MeCeFO rank {args.rank}, svd_every "
        f"{args.svd_every}, micro-batch {args.micro_batch} x {args.seq_len}, 3 workers (worker 1 down from step 0), "
        f"torch {torch.__version__}, {args.threads} thread(s)"
    )
    result = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    if args.combine:
        full, rand = (json.loads(p.read_text()) for p in args.combine)
        compare({"full": full["runs"]["full"], "randomized": rand["runs"]["randomized"]})
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.csv"
        trace.write_text("time,worker,event\n0,1,fail\n")
        runs = {}
        for svd in [args.only] if args.only else ["full", "randomized"]:
            t0 = time.perf_counter()
            exp, summary, losses, errors = run_once(args, svd, trace, Path(tmp) / svd)
            runs[svd] = {
                "final_val_loss": summary.get("final_val_loss"),
                "losses": losses,
                "grad_error": errors,
                "wall_s": time.perf_counter() - t0,
                "svd_refreshes": summary.get("svd_refreshes"),
            }
            print(
                f"{svd:>10}: {runs[svd]['wall_s']:.0f} s wall, {summary.get('svd_refreshes')} refreshes, "
                f"final validation loss {summary.get('final_val_loss')}"
            )
            if svd == "full":  # the subspaces, at the full run's final weights and at initialisation
                state = exp.training
                model = state.model
                batch = state.stream.micro_batch(args.steps + 1000, 0).to(next(model.parameters()).device)
                model.train()
                result["trained"] = subspace_table(
                    model, batch, args, f"trained weights (step {args.steps}, full-SVD run)"
                )
                from mecefo_exp.numerics.model import build_model

                fresh = build_model(exp.cfg.model, state.vocab_size, args.seed)
                result["init"] = subspace_table(fresh, batch, args, "weights at initialisation")
            del exp
        result["runs"] = runs
        if len(runs) == 2:
            compare(runs)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
