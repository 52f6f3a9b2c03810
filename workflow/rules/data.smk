rule prepare_data:
    input:
        config=config_slice("dataset"),
    output:
        meta=in_results("data/{dataset}/meta.json"),
        splits=multiext(in_results("data/{dataset}/"), "train.npz", "val.npz", "test.npz"),
    params:
        config=CONFIG_FILE,
        out=data_out_dir,
    log:
        in_results("logs/prepare_data/{dataset}.log"),
    benchmark:
        in_results("benchmarks/prepare_data/{dataset}.tsv")
    conda:
        ENV
    shell:
        "brownformer data --config {params.config} --dataset {wildcards.dataset} --out {params.out} 2>> {log}"
