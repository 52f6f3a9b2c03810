rule plot_figures:
    input:
        config=config_slice("study"),
        claims=in_results("stats/claims.json"),
        summary=in_results("stats/summary.parquet"),
        calibration=in_results("stats/calibration.parquet"),
        metrics=all_run_metrics,
        stats=all_run_stats,
    output:
        png=[
            report(
                in_figures(f"{figure.stem}.png"),
                caption=f"../report/{figure.caption}",
                category="Figures",
            )
            for figure in FIGURES.values()
        ],
        svg=expand(in_figures("{figure}.svg"), figure=FIGURES),
    params:
        config=CONFIG_FILE,
        results=results_root,
        figures=figures_root,
    threads: CFG.resources["figures_threads"]
    log:
        in_results("logs/plot_figures/plot_figures.log"),
    benchmark:
        in_results("benchmarks/plot_figures/plot_figures.tsv")
    conda:
        ENV
    shell:
        "brownformer figures --config {params.config} --results {params.results} --out {params.figures} "
        "--jobs {threads} 2>> {log}"
