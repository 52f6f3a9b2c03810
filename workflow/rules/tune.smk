# The equal-budget tuning, on request only (`snakemake tune_optimizers --cores 2`): not an input of `rule all`.
# It trains every optimizer of the config's `tuning` block on its tuning seeds and rewrites the `tuned:` block of the
# config file the workflow was started with (nothing else in it changes); the next default run trains with it.


rule tune_optimizers:
    input:
        config=config_slice("study"),
        meta=tuning_data_meta,
    output:
        tuned=in_results("tuning/tuned.yaml"),
        table=in_results("tuning/tuning.md"),
        table_json=in_results("tuning/tuning.json"),
    params:
        config=CONFIG_FILE,
        into=tuning_config_source,
        data_root=in_results("data"),
    threads: 2
    log:
        in_results("logs/tune_optimizers/tune.log"),
    benchmark:
        in_results("benchmarks/tune_optimizers/tune.tsv")
    conda:
        ENV
    shell:
        "brownformer tune --config {params.config} --out {output.tuned} --table {output.table} "
        "--into {params.into} --data-root {params.data_root} --workers {threads} 2>> {log}"
