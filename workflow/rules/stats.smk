rule compute_stats:
    input:
        config=config_slice("stats"),
        index=in_results("runs/{run}/trajectories/index.json"),
    output:
        summary=in_results("runs/{run}/stats/summary.json"),
    params:
        config=CONFIG_FILE,
        run_dir=run_dir,
    threads: CFG.resources["stats_threads"]
    log:
        in_results("logs/compute_stats/{run}.log"),
    benchmark:
        in_results("benchmarks/compute_stats/{run}.tsv")
    conda:
        ENV
    shell:
        "brownformer stats run --config {params.config} --run {wildcards.run} "
        "--traj-dir {params.run_dir}/trajectories --out {params.run_dir}/stats 2>> {log}"



rule compute_replica_stats:
    input:
        config=config_slice("stats"),
        index=in_results("replicas/{rset}/trajectories/index.json"),
    output:
        summary=in_results("replicas/{rset}/stats/summary.json"),
    params:
        config=CONFIG_FILE,
        out=replica_dir,
    threads: CFG.resources["stats_threads"]
    log:
        in_results("logs/compute_replica_stats/{rset}.log"),
    benchmark:
        in_results("benchmarks/compute_replica_stats/{rset}.tsv")
    conda:
        ENV
    shell:
        "brownformer stats run --config {params.config} --run {wildcards.rset} "
        "--traj-dir {params.out}/trajectories --out {params.out}/stats 2>> {log}"


# The calibration simulates the exact shapes (capture times, groups, correlation) of the battery files,
# which the per-run statistics record; the claims then cite size and power at each file's shape. Each run and
# replica set is calibrated as soon as its statistics exist (beside the training of the others, and a rerun of one
# run recalibrates only it); calibrate_tests merges the tables.
rule calibrate_run:
    input:
        config=config_slice("stats"),
        summary=in_results("runs/{run}/stats/summary.json"),
        context=replica_set_stats,
    output:
        table=in_results("runs/{run}/stats/calibration.parquet"),
    params:
        config=CONFIG_FILE,
    threads: CFG.resources["calibrate_threads"]
    log:
        in_results("logs/calibrate_run/{run}.log"),
    benchmark:
        in_results("benchmarks/calibrate_run/{run}.tsv")
    conda:
        ENV
    shell:
        "brownformer stats calibrate --config {params.config} --run-stats {input.summary} "
        "--context {input.context} --jobs {threads} --out {output.table} 2>> {log}"


rule calibrate_replica_set:
    input:
        config=config_slice("stats"),
        summary=in_results("replicas/{rset}/stats/summary.json"),
        context=replica_set_stats,
    output:
        table=in_results("replicas/{rset}/stats/calibration.parquet"),
    params:
        config=CONFIG_FILE,
    threads: CFG.resources["calibrate_threads"]
    log:
        in_results("logs/calibrate_replica_set/{rset}.log"),
    benchmark:
        in_results("benchmarks/calibrate_replica_set/{rset}.tsv")
    conda:
        ENV
    shell:
        "brownformer stats calibrate --config {params.config} --run-stats {input.summary} "
        "--context {input.context} --jobs {threads} --out {output.table} 2>> {log}"


rule calibrate_tests:
    input:
        config=config_slice("stats"),
        parts=all_run_calibrations,
    output:
        table=in_results("stats/calibration.parquet"),
    params:
        config=CONFIG_FILE,
    log:
        in_results("logs/calibrate_tests/calibrate_tests.log"),
    benchmark:
        in_results("benchmarks/calibrate_tests/calibrate_tests.tsv")
    conda:
        ENV
    shell:
        "brownformer stats calibrate --config {params.config} --merge {input.parts} --out {output.table} 2>> {log}"


rule summarize_stats:
    input:
        config=config_slice("study"),
        stats=all_run_stats,
        metrics=all_run_metrics,
        data=expand(in_results("data/{dataset}/meta.json"), dataset=DATASETS),  # chance levels: did the runs train?
        calibration=in_results("stats/calibration.parquet"),
    output:
        claims=in_results("stats/claims.json"),
        summary=in_results("stats/summary.parquet"),
        training_status=in_results("stats/training_status.json"),
    params:
        config=CONFIG_FILE,
        results=results_root,
    log:
        in_results("logs/summarize_stats/summarize_stats.log"),
    benchmark:
        in_results("benchmarks/summarize_stats/summarize_stats.tsv")
    conda:
        ENV
    shell:
        "brownformer stats summary --config {params.config} --results {params.results} "
        "--calibration {input.calibration} --out {params.results}/stats 2>> {log}"
