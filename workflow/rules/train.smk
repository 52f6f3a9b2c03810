rule train_model:
    wildcard_constraints:
        run="|".join(SOLO_RUNS) or "(?!)",  # an ensemble's or interleaved group's members are its rule's outputs
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
# One job per interleaved group (common.smk INTERLEAVED): claim 4's timed runs of one model, a few seeds, trained one
# at a time in the group's order (`--one-at-a-time`), each as `brownformer train --run <run> --out ...` trains it
# alone (its wall-clock a lone run's), each into its own run folder; a member complete for its config is not
# trained again. Both kinds declare every member's outputs and differ only in the trainer's mode.
_TRAIN_GROUPS = [("ensemble", g, "") for g in ENSEMBLES] + [("interleaved", g, " --one-at-a-time") for g in INTERLEAVED]
for _kind, _grp, _mode in _TRAIN_GROUPS:

    rule:
        name:
            group_rule_name(f"train_{_kind}_", _grp)
        input:
            **group_inputs(_grp),
        output:
            metrics=group_outputs(_grp, "metrics.parquet"),
            manifest=group_outputs(_grp, "manifest.json"),
            probes=group_outputs(_grp, "probes/index.parquet"),
        params:
            config=CONFIG_FILE,
            data=group_data_dir,
            runs=" ".join(f"--run {run}" for run in _grp.runs),
            runs_dir=group_runs_dir,
            mode=_mode,
        threads: CFG.resources["train_threads"]
        resources:
            gpu=train_resources_gpu,
            mem_mb=CFG.resources["train_mem_mb"],
            runtime=CFG.resources["train_runtime_min"] * len(_grp.runs),
        log:
            in_results(f"logs/train_{_kind}/{_grp.name}.log"),
        benchmark:
            in_results(f"benchmarks/train_{_kind}/{_grp.name}.tsv")
        conda:
            ENV
        shell:
            "brownformer train --config {params.config} {params.runs} --data {params.data} "
            "--runs-dir {params.runs_dir}{params.mode} --set train.threads={threads} 2>> {log}"
