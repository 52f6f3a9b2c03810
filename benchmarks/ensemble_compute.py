"""Is an ensemble step on the CPU bound by compute? FLOPs of one training step against its time, one thread.

    python benchmarks/ensemble_compute.py --model vit-pre --members 8 --repeats 30 \
        --out benchmarks/results/ensemble_compute.md

For the model of the config (batch `train.batch_size`): the FLOPs of one forward + backward
(torch.utils.flop_counter), the time of that step for one model (a plain module) and for `--members` stacked
members (vmap of functional_call, as brownformer.ensemble trains them), and the rate a batched matmul of the
model's own largest shape reaches on this core. If the one-model step already runs near that rate, no batching
of the same arithmetic makes k members cost less than k times its FLOPs at that rate: the floor printed.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from brownformer.config import load_config
from brownformer.models.transformer import build_model, loss_fn

#: the digits images and classes (brownformer.data: sklearn's 8x8 digits) and the LM's vocabulary order of size
IMAGE_SHAPE, N_CLASSES, VOCAB = (1, 8, 8), 10, 96


def _model(cfg, name: str, seed: int):
    torch.manual_seed(seed)
    mcfg = cfg.models[name]
    if mcfg.arch == "vit":
        return build_model(mcfg, n_classes=N_CLASSES, image_shape=IMAGE_SHAPE)
    return build_model(mcfg, vocab_size=VOCAB)


def _batch(cfg, name: str, batch: int, members: int | None = None):
    mcfg = cfg.models[name]
    lead = (members,) if members else ()
    if mcfg.arch == "vit":
        return torch.randn(*lead, batch, *IMAGE_SHAPE), torch.randint(0, N_CLASSES, (*lead, batch))
    x = torch.randint(0, VOCAB, (*lead, batch, mcfg.seq_len))
    return x, torch.randint(0, VOCAB, (*lead, batch, mcfg.seq_len))


def _timed(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def measure(cfg, name: str, members: int, repeats: int) -> dict:
    batch = cfg.train.batch_size
    one = _model(cfg, name, 0)
    x, y = _batch(cfg, name, batch)

    def step_one():
        one.zero_grad(set_to_none=True)
        loss_fn(one(x), y).backward()

    with FlopCounterMode(display=False) as counter:
        step_one()
    flops = counter.get_total_flops()
    models = [_model(cfg, name, s) for s in range(members)]
    params, buffers = stack_module_state(models)
    params = {k: v.requires_grad_() for k, v in params.items()}
    base = _model(cfg, name, 0).to("meta")
    xs, ys = _batch(cfg, name, batch, members)

    def step_stacked():
        for p in params.values():
            p.grad = None
        with sdpa_kernel([SDPBackend.MATH]):
            logits = vmap(lambda p, b, i: functional_call(base, (p, b), (i,)))(params, buffers, xs)
        sum(loss_fn(logits[e], ys[e]) for e in range(members)).backward()

    d = cfg.models[name].d_model
    tokens = batch * (cfg.models[name].seq_len if cfg.models[name].arch == "lm" else 17)
    a, b = torch.randn(members, tokens, d), torch.randn(members, d, 2 * d)  # the MLP's up-projection, per member
    t_mm = _timed(lambda: torch.bmm(a, b), repeats)
    return {"flops": flops, "t_one": _timed(step_one, repeats), "t_stacked": _timed(step_stacked, repeats),
            "mm_rate": 2 * members * tokens * d * 2 * d / t_mm}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="vit-pre")
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = load_config(args.config)
    r = measure(cfg, args.model, args.members, args.repeats)
    k = args.members
    rate_one = r["flops"] / r["t_one"]
    floor = k * r["flops"] / r["mm_rate"]
    text = "\n".join([
        f"## {args.model}: one training step (forward + backward, batch {cfg.train.batch_size}), 1 thread", "",
        f"`python benchmarks/ensemble_compute.py --model {args.model} --members {k} --repeats {args.repeats}`", "",
        "| quantity | value |", "|---|---|",
        f"| FLOPs of one step | {r['flops'] / 1e6:.1f} M |",
        f"| one model: CPU per step | {r['t_one'] * 1e3:.2f} ms ({rate_one / 1e9:.2f} GFLOP/s) |",
        f"| {k} stacked members: CPU per step | {r['t_stacked'] * 1e3:.2f} ms = {r['t_stacked'] / r['t_one']:.2f}x one |",
        f"| batched matmul of the MLP's shape, {k} members | {r['mm_rate'] / 1e9:.2f} GFLOP/s |",
        f"| floor for {k} members: {k} x FLOPs at that rate | {floor * 1e3:.2f} ms = {floor / r['t_one']:.2f}x one |",
        f"| goal: {k} members in 2.5x one | {2.5 * r['t_one'] * 1e3:.2f} ms |", ""])
    print(text)
    if args.out is not None:
        with open(args.out, "a") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
