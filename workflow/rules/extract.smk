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


# The replicas of one run (same initialisation, other data order) -> their contrasts around the replica-mean path
# (the drift), in the training-time analysis window: claims 3b and 3c are decided on these.
rule extract_replicas:
    input:
        # the window's stats.momentum_times; the replica runs' own slices reach it through their probe stores
        config=config_slice("stats"),
        probes=replica_probe_indexes,
    output:
        index=in_results("replicas/{rset}/trajectories/index.json"),
    params:
        config=CONFIG_FILE,
        runs=in_results("runs"),
        out=replica_dir,
    log:
        in_results("logs/extract_replicas/{rset}.log"),
    benchmark:
        in_results("benchmarks/extract_replicas/{rset}.tsv")
    conda:
        ENV
    shell:
        "brownformer extract-replicas --config {params.config} --run {wildcards.rset} --runs-dir {params.runs} "
        "--out {params.out}/trajectories 2>> {log}"
