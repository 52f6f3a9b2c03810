rule extract_trajectories:
    input:
        metrics="results/runs/{run}/metrics.parquet",
        probes="results/runs/{run}/probes/index.parquet",
    output:
        index="results/runs/{run}/trajectories/index.json",
    params:
        config=CONFIG_FILE,
        run_dir=run_dir,
    log:
        "results/logs/extract_trajectories/{run}.log",
    benchmark:
        "results/benchmarks/extract_trajectories/{run}.tsv"
    conda:
        ENV
    shell:
        "brownformer extract --config {params.config} --run-dir {params.run_dir} "
        "--out {params.run_dir}/trajectories 2>> {log}"
