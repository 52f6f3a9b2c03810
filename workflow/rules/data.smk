rule prepare_data:
    output:
        meta="results/data/{dataset}/meta.json",
        splits=multiext("results/data/{dataset}/", "train.npz", "val.npz", "test.npz"),
    params:
        config=CONFIG_FILE,
        out=data_out_dir,
    log:
        "results/logs/prepare_data/{dataset}.log",
    benchmark:
        "results/benchmarks/prepare_data/{dataset}.tsv"
    conda:
        ENV
    shell:
        "brownformer data --config {params.config} --dataset {wildcards.dataset} --out {params.out} 2>> {log}"
