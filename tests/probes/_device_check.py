"""Temporary device-machine script: clean CPU overhead timings + a CUDA smoke test of the probes."""
import json, logging, os, shutil, sys, time
from pathlib import Path
import torch
from brownformer.config import load_config
from brownformer.data import prepare_dataset, load_prepared
from brownformer.train import train_run, model_for_data
from brownformer.probes import ProbeRecorder, extract_trajectories

OUT = Path(os.environ.get("OUT", "/tmp/out"))
WORK = Path("/tmp/pw")
REC = ["probes.noise_every=27", "probes.noise_samples=8"]


def data_for(cfg, spec):
    ds = cfg.models[spec.model].dataset
    ddir = WORK / "data" / ds
    if not (ddir / "meta.json").exists():
        prepare_dataset(cfg.datasets[ds], ddir)
    return ddir, load_prepared(ddir)


def one(cfg, run, probes, tag):
    spec = cfg.run(run)
    ddir, data = data_for(cfg, spec)
    out = WORK / "runs" / tag
    shutil.rmtree(out, ignore_errors=True)
    dev = torch.device("cuda" if cfg.device == "cuda" else "cpu")
    cbs = [ProbeRecorder(cfg, spec, data, out / "probes", dev, lambda: model_for_data(cfg, spec.model, data))] if probes else []
    m = train_run(cfg, run, ddir, out, callbacks=cbs, progress=False)
    r = {"run": run, "tag": tag, "probes": probes, "wall": json.loads((out / "manifest.json").read_text())["wall_time_s"],
         "final_loss": float(m.train_loss.iloc[-1])}
    if probes:
        idx = cbs[0].store.index
        r.update(capture_s=float(idx.seconds.sum()), noise_s=float(idx[idx.has_noise].seconds.sum()),
                 n_captures=len(idx), n_noise=int(idx.has_noise.sum()), store_mb=cbs[0].store.size_bytes() / 2**20)
        t = time.perf_counter()
        s = extract_trajectories(cfg, out, out / "trajectories")
        r.update(extract_s=time.perf_counter() - t, n_files=s["n_files"], overhead_in_run=s["capture_overhead"])
    print(json.dumps(r), flush=True)
    return r, m


def main():
    results = []
    if sys.argv[1] == "cpu":
        for run in ["vit-pre__adamw__s0", "lm-pre__adamw__s0"]:
            for name, ov in [("default", []), ("recommended", REC)]:
                cfg = load_config("config/config.yaml", ov + ["device=cpu"])
                for rep in range(2):
                    for probes in (False, True):
                        results.append(one(cfg, run, probes, f"{run}_{name}_{probes}")[0] | {"config": name})
    else:
        for run in ["vit-pre__kfac-iterative__s0", "lm-pre__adamw__s0"]:
            cfg = load_config("config/config.yaml", ["device=cuda", "train.steps=60"])
            a, ma = one(cfg, run, False, f"{run}_cuda_plain")
            b, mb = one(cfg, run, True, f"{run}_cuda_probed")
            same = bool((ma.train_loss.values == mb.train_loss.values).all())
            results += [a, b | {"losses_identical": same}]
            print(json.dumps({"run": run, "cuda_losses_identical": same}), flush=True)
    (OUT / f"results_{sys.argv[1]}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
