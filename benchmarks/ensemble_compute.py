"""Time of one training step: one model as the pipeline trains it against k members on each ensemble path.

    python benchmarks/ensemble_compute.py --model vit-pre --members 8 --steps 20 --rounds 3 \
        --out benchmarks/results/ensemble_compute.json
    python benchmarks/ensemble_compute.py --device cuda --paths one batched vmap   # scripts/gpu_check.sh

On the CPU the clock is this process's CPU time; on a GPU it is wall time between device synchronisations
(:func:`step_clock`), the weights and batches on the device, the threads left as they are.

One thread, the config's batch per member, AdamW (foreach, as on the CPU) with per-member gradient clipping.
Paths, timed in interleaved rounds (a load change on the shared cores hits every path alike), CPU seconds of
this process per step:
  one      a plain module trained by brownformer.train_step.TrainStep (eager, SDPA attention): a run alone;
  one-math the same with SDPA held to its math kernel (what a run alone would cost with attention as matmuls);
  vmap     vmap of functional_call over the stacked weights (brownformer.ensemble, backend "vmap");
  batched  brownformer.ensemble_batched.batched_logits (backend "batched");
  compile  torch.compile (inductor) of the batched forward and loss; its backward is compiled with it.
Also: the FLOPs of one step (torch.utils.flop_counter), the rate of a batched matmul of the MLP's shape (a
floor), and, with --compile-cost, the compile time of the `compile` path in a fresh process with an empty
inductor cache, then in a second process on the cache the first left (FX graph cache).
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
from pathlib import Path

import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from brownformer.config import load_config
from brownformer.ensemble import clip_members
from brownformer.ensemble_batched import batched_logits
from brownformer.models.transformer import build_model, loss_fn
from brownformer.train_step import TrainStep

#: the digits images and classes (brownformer.data: sklearn's 8x8 digits) and the LM's vocabulary order of size
IMAGE_SHAPE, N_CLASSES, VOCAB = (1, 8, 8), 10, 96


def step_clock(device: str):
    """A clock for timing steps on `device`: process CPU seconds on the CPU (a load on the shared cores then moves
    every path alike); wall seconds after a synchronisation on an accelerator, whose work is asynchronous."""
    if torch.device(device).type == "cpu":
        return time.process_time
    module = getattr(torch, torch.device(device).type)

    def clock():
        module.synchronize()
        return time.perf_counter()
    return clock


def seeded_model(cfg, name: str, seed: int):
    """The config's model `name` initialised from torch seed `seed` (as a run of that seed starts)."""
    torch.manual_seed(seed)
    mcfg = cfg.models[name]
    if mcfg.arch == "vit":
        return build_model(mcfg, n_classes=N_CLASSES, image_shape=IMAGE_SHAPE)
    return build_model(mcfg, vocab_size=VOCAB)


def random_batch(cfg, name: str, batch: int, members: int | None = None):
    """Random inputs and labels of the model's shape: (B, ...), or (members, B, ...)."""
    mcfg = cfg.models[name]
    lead = (members,) if members else ()
    if mcfg.arch == "vit":
        return torch.randn(*lead, batch, *IMAGE_SHAPE), torch.randint(0, N_CLASSES, (*lead, batch))
    x = torch.randint(0, VOCAB, (*lead, batch, mcfg.seq_len))
    return x, torch.randint(0, VOCAB, (*lead, batch, mcfg.seq_len))


def _member_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(E,): each member's loss_fn on its own batch, unrolled (vmap of loss_fn inside torch.compile is avoided)."""
    return torch.stack([loss_fn(logits[e], y[e]) for e in range(logits.size(0))])


def _math_attention(model, x):
    with sdpa_kernel([SDPBackend.MATH]):
        return model(x)


def step_functions(cfg, name: str, members: int, device: str = "cpu") -> dict:
    """Path name -> a callable doing one training step of that path on `device` (state kept inside)."""
    batch, clip = cfg.train.batch_size, cfg.train.grad_clip
    one = seeded_model(cfg, name, 0).to(device)
    train_one = TrainStep(one, torch.optim.AdamW(one.parameters(), lr=1e-3, foreach=True), device=device,
                          grad_clip=clip)
    one_math = seeded_model(cfg, name, 0).to(device)
    train_math = TrainStep(one_math, torch.optim.AdamW(one_math.parameters(), lr=1e-3, foreach=True), device=device,
                           grad_clip=clip, forward=lambda x: _math_attention(one_math, x))
    x1, y1 = (t.to(device) for t in random_batch(cfg, name, batch))
    xs, ys = (t.to(device) for t in random_batch(cfg, name, batch, members))
    base = seeded_model(cfg, name, 0).to("meta")

    def stacked():
        params, buffers = stack_module_state([seeded_model(cfg, name, s) for s in range(members)])
        params = {k: torch.nn.Parameter(v.detach().clone().to(device)) for k, v in params.items()}
        buffers = {k: v.to(device) for k, v in buffers.items()}
        return params, buffers, torch.optim.AdamW(params.values(), lr=1e-3, foreach=True)

    def member_step(loss_of, params, opt):
        def step():
            opt.zero_grad(set_to_none=True)
            loss_of(params).sum().backward()
            clip_members([p.grad for p in params.values()], members, clip)
            opt.step()
        return step

    pv, bv, ov = stacked()

    def vmap_losses(params):
        with sdpa_kernel([SDPBackend.MATH]):
            logits = vmap(lambda p, b, i: functional_call(base, (p, b), (i,)))(params, bv, xs)
        return vmap(loss_fn)(logits, ys)
    pb, _, ob = stacked()
    pc, _, oc = stacked()
    compiled = torch.compile(lambda p, x, y: _member_losses(batched_logits(p, base, x), y))
    return {"one": lambda: train_one(x1, y1), "one-math": lambda: train_math(x1, y1),
            "vmap": member_step(vmap_losses, pv, ov),
            "batched": member_step(lambda p: vmap(loss_fn)(batched_logits(p, base, xs), ys), pb, ob),
            "compile": member_step(lambda p: compiled(p, xs, ys), pc, oc)}


def measure(cfg, name: str, members: int, steps: int, rounds: int, paths: list[str] | None = None,
            device: str = "cpu") -> dict:
    fns = step_functions(cfg, name, members, device)
    clock = step_clock(device)
    fns = {p: fn for p, fn in fns.items() if paths is None or p in paths}
    warm = {}
    for path, fn in fns.items():  # 3 warm-up steps (the compile path compiles in its first)
        t = clock()
        for _ in range(3):
            fn()
        warm[path] = clock() - t
    per_round = {path: [] for path in fns}
    for _ in range(rounds):
        for path, fn in fns.items():
            t = clock()
            for _ in range(steps):
                fn()
            per_round[path].append((clock() - t) / steps)
    one = seeded_model(cfg, name, 0).to(device)
    x, y = (t.to(device) for t in random_batch(cfg, name, cfg.train.batch_size))
    with FlopCounterMode(display=False) as counter:
        loss_fn(one(x), y).backward()
    mcfg = cfg.models[name]
    d = mcfg.d_model
    tokens = cfg.train.batch_size * (mcfg.seq_len if mcfg.arch == "lm" else one.n_patches + 1)
    a = torch.randn(members, tokens, d, device=device)  # the MLP's up-projection, per member
    b = torch.randn(members, d, 2 * d, device=device)
    t = clock()
    for _ in range(50):
        torch.bmm(a, b)
    mm_rate = 50 * 2 * members * tokens * d * 2 * d / (clock() - t)
    return {"model": name, "members": members, "steps": steps, "rounds": rounds, "device": str(device),
            "clock": "process CPU time" if clock is time.process_time else "wall time between synchronisations",
            "batch_per_member": cfg.train.batch_size, "flops_per_step": counter.get_total_flops(),
            "mm_rate_flops": mm_rate, "warmup_wall_s": warm, "cpu_s_per_step": per_round,
            "ratio_to_one": {p: [v / o for v, o in zip(per_round[p], per_round["one"])] for p in fns}}


def compile_cost(config: str, name: str, members: int) -> dict:
    """Compile time of the compile path: a fresh process on an empty inductor cache, then a second on its cache."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
        for label in ("cold", "warm"):
            before = os.times()
            t = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--config", config, "--model", name, "--members",
                            str(members), "--first-step-only"], check=True, env=env)
            after = os.times()
            out[label] = {"wall_s": time.perf_counter() - t,
                          "cpu_s": (after.children_user - before.children_user)
                          + (after.children_system - before.children_system)}
    return out


def _first_step_only(cfg, name: str, members: int) -> None:
    """One step of the compile path in this process (the compile happens there), then exit."""
    step_functions(cfg, name, members)["compile"]()


def _summary(r: dict) -> str:
    med = {p: statistics.median(v) for p, v in r["cpu_s_per_step"].items()}
    rows = [f"| {p} | {' / '.join(f'{v * 1e3:.1f}' for v in r['cpu_s_per_step'][p])} | {med[p] * 1e3:.1f} | "
            f"{' / '.join(f'{v:.2f}' for v in r['ratio_to_one'][p])} | "
            f"{(1 if p.startswith('one') else r['members']) / med[p]:.1f} |" for p in med]
    k = r["members"]
    return "\n".join([
        f"### {r['model']}: one training step on {r.get('device', 'cpu')}, batch {r['batch_per_member']} per member, "
        f"{k} members, 1 thread", "",
        f"FLOPs of one step {r['flops_per_step'] / 1e6:.1f} M; batched matmul of the MLP's shape "
        f"{r['mm_rate_flops'] / 1e9:.1f} GFLOP/s, so {k} members' FLOPs at that rate take "
        f"{k * r['flops_per_step'] / r['mm_rate_flops'] * 1e3:.1f} ms.", "",
        f"| path | ms per step ({r.get('clock', 'process CPU time')}), each round | median | / one, each round | "
        "seed-steps per second |",
        "|---|---|---|---|---|", *rows, "",
        "Warm-up (3 steps, wall s; the compile path compiles in it): "
        + ", ".join(f"{p} {v:.1f}" for p, v in r["warmup_wall_s"].items()), ""])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="vit-pre")
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20, help="steps timed per path and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paths", nargs="+", default=None, help="the paths to time (default: all)")
    ap.add_argument("--compile-cost", action="store_true", help="also time compiling in fresh processes")
    ap.add_argument("--first-step-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu", help="cpu (one thread, CPU time) or an accelerator (wall time)")
    ap.add_argument("--out", type=Path, default=None, help="a JSON file the result is appended to (a list)")
    args = ap.parse_args(argv)
    if torch.device(args.device).type == "cpu":
        torch.set_num_threads(1)
    cfg = load_config(args.config)
    if args.first_step_only:
        return _first_step_only(cfg, args.model, args.members)
    r = measure(cfg, args.model, args.members, args.steps, args.rounds, args.paths, args.device)
    if args.compile_cost:
        r["compile_cost"] = compile_cost(args.config, args.model, args.members)
    r["command"] = "python benchmarks/ensemble_compute.py " + " ".join(argv if argv is not None else sys.argv[1:])
    r["load_average"] = os.getloadavg()
    print(_summary(r))
    if "compile_cost" in r:
        print("compile:", json.dumps(r["compile_cost"]))
    if args.out is not None:
        previous = json.loads(args.out.read_text()) if args.out.exists() else []
        args.out.write_text(json.dumps([*previous, r], indent=1) + "\n")


if __name__ == "__main__":
    main()
