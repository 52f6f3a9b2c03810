rule train_model:
    wildcard_constraints:
        run="|".join(SOLO_RUNS) or "(?!)",  # an ensemble's members are its rule's outputs
    input:
        config=config_slice("run"),
        meta=data_meta_of_run,
    output:
        metrics=in_results("runs/{run}/metrics.parquet"),
        manifest=in_results("runs/{run}/manifest.json"),
        probes=in_results("runs/{run}/probes/index.parquet"),
    params:
        config=CONFIG_FILE,
        data=data_dir_of_run,
        out=run_dir,
    threads: CFG.resources["train_threads"]
    resources:
        gpu=train_resources_gpu,
        mem_mb=CFG.resources["train_mem_mb"],
        runtime=CFG.resources["train_runtime_min"],
    log:
        in_results("logs/train_model/{run}.log"),
    benchmark:
        in_results("benchmarks/train_model/{run}.tsv")
    conda:
        ENV
    shell:
        "brownformer train --config {params.config} --run {wildcards.run} --data {params.data} "
        "--out {params.out} --set train.threads={threads} 2>> {log}"


# One job per ensemble (common.smk ENSEMBLES): its members train as one batched model (brownformer.ensemble),
# each into its own run folder; `brownformer train --run <one member> --out ...` still trains one alone.
for _ens in ENSEMBLES:

    rule:
        name:
            ensemble_rule_name(_ens)
        input:
            **ensemble_inputs(_ens),
        output:
            metrics=ensemble_outputs(_ens, "metrics.parquet"),
            manifest=ensemble_outputs(_ens, "manifest.json"),
            probes=ensemble_outputs(_ens, "probes/index.parquet"),
        params:
            config=CONFIG_FILE,
            data=lambda w, input: str(Path(input.meta).parent),
            runs=" ".join(f"--run {run}" for run in _ens.runs),
            runs_dir=lambda w, output: str(Path(output.metrics[0]).parents[1]),  # results/runs/<run>/metrics
        threads: CFG.resources["train_threads"]
        resources:
            gpu=train_resources_gpu,
            mem_mb=CFG.resources["train_mem_mb"],
            runtime=CFG.resources["train_runtime_min"] * len(_ens.runs),
        log:
            in_results(f"logs/train_ensemble/{_ens.name}.log"),
        benchmark:
            in_results(f"benchmarks/train_ensemble/{_ens.name}.tsv")
        conda:
            ENV
        shell:
            "brownformer train --config {params.config} {params.runs} --data {params.data} "
            "--runs-dir {params.runs_dir} --set train.threads={threads} 2>> {log}"
