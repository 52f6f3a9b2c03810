rule build_report:
    input:
        figures=expand("figures/{figure}.png", figure=FIGURES),
        claims="results/stats/claims.json",
        summary="results/stats/summary.parquet",
        calibration="results/stats/calibration.parquet",
        manifests=expand("results/runs/{run}/manifest.json", run=RUNS),
    output:
        html=report("results/report/report.html", caption="../report/report.rst", category="Report"),
        notebook="results/report/report.ipynb",
    params:
        config=CONFIG_FILE,
    log:
        "results/logs/build_report/build_report.log",
    benchmark:
        "results/benchmarks/build_report/build_report.tsv"
    conda:
        ENV
    shell:
        "brownformer report --config {params.config} --results results --figures figures "
        "--out results/report 2>> {log}"
