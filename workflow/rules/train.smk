rule train_model:
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
