rule extract_trajectories:
    input:
        config=config_slice("run"),
        metrics=in_results("runs/{run}/metrics.parquet"),
        probes=in_results("runs/{run}/probes/index.parquet"),
    output:
        index=in_results("runs/{run}/trajectories/index.json"),
    params:
        config=CONFIG_FILE,
        run_dir=run_dir,
    log:
        in_results("logs/extract_trajectories/{run}.log"),
    benchmark:
        in_results("benchmarks/extract_trajectories/{run}.tsv")
    conda:
        ENV
    shell:
        "brownformer extract --config {params.config} --run-dir {params.run_dir} "
        "--out {params.run_dir}/trajectories 2>> {log}"
