"""Prototype cost of an iterative K-FAC ensemble: per-member factors and batched CG solves, against one K-FAC run.

    python benchmarks/ensemble_kfac.py --model vit-pre --members 8 --steps 20 --rounds 3 \
        --out benchmarks/results/ensemble_kfac.json
    python benchmarks/ensemble_kfac.py --device cuda   # scripts/gpu_check.sh: wall time between synchronisations

Not an optimizer (brownformer.optim.KFAC is not changed): it times the per-member work a K-FAC ensemble adds
to the batched AdamW step, built from brownformer.ensemble_batched's taps (each linear layer's input a and
output gradient g, per member, no nn.Linear hooks):
  factors  A = [a 1]^T [a 1] / N and G = g^T g / N for every linear layer of every member (batched matmuls),
           from a second backward with labels sampled from the model (`fisher: sampled`), as a factor step of
           the config (every `factor_every` steps) does;
  solve    conjugate gradient on G X A + lambda X = grad W for every layer of every member, layers of one
           shape and all members in one batched CG, `cg_max_iter` iterations (the cap: an upper bound).
Against: one K-FAC run's step as the pipeline trains it (brownformer.train_step.TrainStep with the config's
kfac-iterative optimizer, eager, one thread), and the batched AdamW ensemble step (benchmarks/ensemble_compute.py).
Per member step = ensemble forward/backward/update + factors / factor_every + solve.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import stack_module_state, vmap

from brownformer.config import load_config
from brownformer.ensemble import clip_members
from brownformer.ensemble_batched import batched_logits
from brownformer.models.transformer import loss_fn
from brownformer.optim import build_optimizer
from brownformer.train_step import TrainStep

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ensemble_compute import random_batch, seeded_model, step_clock  # noqa: E402


def batched_kronecker_cg(G: torch.Tensor, A: torch.Tensor, V: torch.Tensor, damping: float,
                         iterations: int) -> torch.Tensor:
    """X with G X A + damping X = V for each of L stacked problems, by `iterations` CG steps from X = 0.

    G (L, out, out), A (L, in, in) symmetric positive semi-definite, V (L, out, in); the operator
    X -> G X A + lambda X is symmetric positive definite in the Frobenius inner product (Martens & Grosse 2015).
    """
    X, R = torch.zeros_like(V), V.clone()
    P, rs = R.clone(), (R * R).sum(dim=(1, 2))  # (L,)
    for _ in range(iterations):
        AP = torch.baddbmm(P, torch.bmm(G, P), A, beta=damping)  # (L, out, in): G P A + lambda P
        alpha = (rs / (P * AP).sum(dim=(1, 2)).clamp_min(1e-30)).view(-1, 1, 1)
        X.add_(alpha * P)
        R.sub_(alpha * AP)
        rs_new = (R * R).sum(dim=(1, 2))
        P = R + (rs_new / rs.clamp_min(1e-30)).view(-1, 1, 1) * P
        rs = rs_new
    return X


def _factors(taps: dict, grads: list[torch.Tensor], E: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Layer -> (A (E, in+1, in+1), G (E, out, out)) from the taps' inputs and their outputs' gradients."""
    out = {}
    for (name, (a, _)), grad in zip(taps.items(), grads):
        N = a.size(1)
        a1 = torch.cat([a, a.new_ones(E, N, 1)], dim=2)  # (E, N, in+1): the bias as a ones column
        g = grad * N  # (E, N, out): per-token output gradients of the summed loss
        out[name] = (torch.bmm(a1.transpose(1, 2), a1) / N, torch.bmm(g.transpose(1, 2), g) / N)
    return out


def prototype(cfg, name: str, members: int, damping: float, iterations: int, device: str = "cpu"):
    """(factor step, solve, AdamW ensemble step) callables on `members` stacked models on `device`."""
    E, batch, clip = members, cfg.train.batch_size, cfg.train.grad_clip
    base = seeded_model(cfg, name, 0).to("meta")
    params, _ = stack_module_state([seeded_model(cfg, name, s) for s in range(E)])
    params = {k: torch.nn.Parameter(v.detach().clone().to(device)) for k, v in params.items()}
    opt = torch.optim.AdamW(params.values(), lr=1e-3, foreach=True)
    xs, ys = (t.to(device) for t in random_batch(cfg, name, batch, E))
    state = {}

    def factor_step():
        taps = {}
        logits = batched_logits(params, base, xs, taps=taps)
        with torch.no_grad():  # labels drawn from the model's own predictive distribution (`fisher: sampled`)
            sampled = torch.multinomial(F.softmax(logits.detach().flatten(0, -2).float(), -1), 1).view(ys.shape)
        grads = torch.autograd.grad(vmap(loss_fn)(logits, sampled).sum(), [y for _, y in taps.values()])
        state["factors"] = _factors(taps, grads, E)

    def solve():
        by_shape = defaultdict(list)  # (out, in+1) -> layers: one CG for all layers of a shape and all members
        for layer, (A, G) in state["factors"].items():
            by_shape[(G.size(1), A.size(1))].append(layer)
        for layers in by_shape.values():
            G = torch.cat([state["factors"][lay][1] for lay in layers])  # (L*E, out, out)
            A = torch.cat([state["factors"][lay][0] for lay in layers])  # (L*E, in+1, in+1)
            V = torch.cat([torch.cat([params[f"{lay}.weight"].grad, params[f"{lay}.bias"].grad.unsqueeze(2)], 2)
                           for lay in layers])  # (L*E, out, in+1): [dW db]
            batched_kronecker_cg(G, A, V, damping, iterations)

    def adamw_step():
        opt.zero_grad(set_to_none=True)
        vmap(loss_fn)(batched_logits(params, base, xs), ys).sum().backward()
        clip_members([p.grad for p in params.values()], E, clip)
        opt.step()
    return factor_step, solve, adamw_step


def _kfac_one(cfg, name: str, device: str = "cpu"):
    """One K-FAC run's training step, as the pipeline trains it (TrainStep and the config's optimizer)."""
    ocfg = cfg.plan(f"{name}__kfac-iterative__s0").optimizer
    model = seeded_model(cfg, name, 0).to(device)
    step = TrainStep(model, build_optimizer(model, ocfg.type, ocfg.lr, ocfg.params), device=device,
                     grad_clip=cfg.train.grad_clip)
    x, y = (t.to(device) for t in random_batch(cfg, name, cfg.train.batch_size))
    return (lambda: step(x, y)), ocfg.params


def _per_call(fn, n: int, clock) -> float:
    t = clock()
    for _ in range(n):
        fn()
    return (clock() - t) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="vit-pre")
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu (one thread, CPU time) or an accelerator (wall time)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if torch.device(args.device).type == "cpu":
        torch.set_num_threads(1)
    clock = step_clock(args.device)
    cfg = load_config(args.config)
    kfac_step, kp = _kfac_one(cfg, args.model, args.device)
    fns = {"kfac_one": kfac_step}
    for E in (1, args.members):
        factor_step, solve, adamw_step = prototype(cfg, args.model, E, kp["damping"], kp["cg_max_iter"], args.device)
        factor_step()
        adamw_step()
        fns.update({f"adamw_E{E}": adamw_step, f"factors_E{E}": factor_step, f"solve_E{E}": solve})
    for fn in fns.values():  # warm-up
        fn()
    rounds = {k: [] for k in fns}
    for _ in range(args.rounds):
        for k, fn in fns.items():
            rounds[k].append(_per_call(fn, args.steps, clock))
    med = {k: statistics.median(v) for k, v in rounds.items()}
    every = kp["factor_every"]
    per_step = {E: med[f"adamw_E{E}"] + med[f"factors_E{E}"] / every + med[f"solve_E{E}"]
                for E in (1, args.members)}
    result = {"command": "python benchmarks/ensemble_kfac.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "model": args.model, "device": args.device, "members": args.members, "factor_every": every, "cg_iterations": kp["cg_max_iter"],
              "cpu_s_per_call": rounds, "median": med, "prototype_step": per_step,
              "ratio_members_to_kfac_one": per_step[args.members] / med["kfac_one"], "load_average": os.getloadavg()}
    unit = "CPU ms" if clock is time.process_time else "wall ms between synchronisations"
    lines = [f"### {args.model}: K-FAC ensemble prototype on {args.device}, {args.members} members ({unit}, median of "
             f"{args.rounds} rounds of {args.steps} calls)", "",
             f"| call | {unit} each round | median |", "|---|---|---|"]
    lines += [f"| {k} | {' / '.join(f'{v * 1e3:.1f}' for v in rounds[k])} | {med[k] * 1e3:.1f} |" for k in rounds]
    lines += ["", f"Prototype step (AdamW-ensemble step + factors / {every} + solve): "
              + ", ".join(f"{E} member(s) {v * 1e3:.1f} ms" for E, v in per_step.items())
              + f"; one K-FAC run's step {med['kfac_one'] * 1e3:.1f} ms; {args.members} members / one K-FAC run = "
              f"{result['ratio_members_to_kfac_one']:.2f}x", ""]
    print("\n".join(lines))
    if args.out is not None:
        previous = json.loads(args.out.read_text()) if args.out.exists() else []
        args.out.write_text(json.dumps([*previous, result], indent=1) + "\n")


if __name__ == "__main__":
    main()
