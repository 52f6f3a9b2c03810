# Real pretrained checkpoints (config `pretrained:`: a folder or a package that ships one), analysed beside the
# trained runs; descriptive. The rule exists only when the block lists a model (PRETRAINED, common.smk). A model
# that cannot be had (package not installed, sha256 mismatch) gets a pretrained.json saying "unavailable" and why
# (--record-unavailable), so the report says so and the rest of the run goes on.
if PRETRAINED:

    wildcard_constraints:
        name="|".join(PRETRAINED),

    rule analyze_pretrained:
        input:
            config=config_slice("pretrained"),
            model=pretrained_model_files,
        output:
            json=in_results("pretrained/{name}/pretrained.json"),
        params:
            config=CONFIG_FILE,
            model_dir=pretrained_model_dir,
            options=pretrained_options,
            out=pretrained_out_dir,
        threads: CFG.resources["stats_threads"]
        log:
            in_results("logs/analyze_pretrained/{name}.log"),
        benchmark:
            in_results("benchmarks/analyze_pretrained/{name}.tsv")
        conda:
            ENV
        shell:
            "HF_HUB_OFFLINE=1 brownformer pretrained {params.model_dir} --config {params.config} "
            "--name {wildcards.name} --out {params.out} {params.options} --jobs {threads} --record-unavailable >> {log} 2>&1"
