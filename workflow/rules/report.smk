rule build_report:
    input:
        config=config_slice("study"),
        figures=expand(in_figures("{figure}.png"), figure=FIGURES),
        claims=in_results("stats/claims.json"),
        summary=in_results("stats/summary.parquet"),
        calibration=in_results("stats/calibration.parquet"),
        manifests=expand(in_results("runs/{run}/manifest.json"), run=RUNS),
        pretrained=PRETRAINED_OUTPUTS,
    output:
        html=report(in_results("report/report.html"), caption="../report/report.rst", category="Report"),
        notebook=in_results("report/report.ipynb"),
    params:
        config=CONFIG_FILE,
        results=results_root,
        figures=figures_root,
    log:
        in_results("logs/build_report/build_report.log"),
    benchmark:
        in_results("benchmarks/build_report/build_report.tsv")
    conda:
        ENV
    shell:
        "brownformer report --config {params.config} --results {params.results} --figures {params.figures} "
        "--out {params.results}/report 2>> {log}"
