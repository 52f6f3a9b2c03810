rule compute_stats:
    input:
        index="results/runs/{run}/trajectories/index.json",
        calibration="results/stats/calibration.parquet",
    output:
        summary="results/runs/{run}/stats/summary.json",
    params:
        config=CONFIG_FILE,
        run_dir=run_dir,
    threads: CFG.resources.get("stats_threads", 1)
    log:
        "results/logs/compute_stats/{run}.log",
    benchmark:
        "results/benchmarks/compute_stats/{run}.tsv"
    conda:
        ENV
    shell:
        "brownformer stats run --config {params.config} --run {wildcards.run} "
        "--traj-dir {params.run_dir}/trajectories --calibration {input.calibration} "
        "--out {params.run_dir}/stats 2>> {log}"


rule calibrate_tests:
    input:
        indexes=expand("results/runs/{run}/trajectories/index.json", run=RUNS),
    output:
        table="results/stats/calibration.parquet",
    params:
        config=CONFIG_FILE,
    threads: CFG.resources.get("calibrate_threads", 2)
    log:
        "results/logs/calibrate_tests/calibrate_tests.log",
    benchmark:
        "results/benchmarks/calibrate_tests/calibrate_tests.tsv"
    conda:
        ENV
    shell:
        "brownformer stats calibrate --config {params.config} --traj-index {input.indexes} "
        "--jobs {threads} --out {output.table} 2>> {log}"


rule summarize_stats:
    input:
        stats=all_run_stats,
        metrics=all_run_metrics,
        calibration="results/stats/calibration.parquet",
    output:
        claims="results/stats/claims.json",
        summary="results/stats/summary.parquet",
    params:
        config=CONFIG_FILE,
    log:
        "results/logs/summarize_stats/summarize_stats.log",
    benchmark:
        "results/benchmarks/summarize_stats/summarize_stats.tsv"
    conda:
        ENV
    shell:
        "brownformer stats summary --config {params.config} --results results "
        "--calibration {input.calibration} --out results/stats 2>> {log}"
