rule plot_figures:
    input:
        claims="results/stats/claims.json",
        summary="results/stats/summary.parquet",
        calibration="results/stats/calibration.parquet",
        metrics=all_run_metrics,
        stats=all_run_stats,
    output:
        png=[
            report(
                f"figures/{name}.png",
                caption=f"../report/{name}.rst",
                category="Figures",
            )
            for name in FIGURES
        ],
        svg=expand("figures/{figure}.svg", figure=FIGURES),
    params:
        config=CONFIG_FILE,
    log:
        "results/logs/plot_figures/plot_figures.log",
    benchmark:
        "results/benchmarks/plot_figures/plot_figures.tsv"
    conda:
        ENV
    shell:
        "brownformer figures --config {params.config} --results results --out figures 2>> {log}"
