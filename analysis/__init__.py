"""Analysis of mecefo-exp runs: run folders -> one table -> the paper's tables and figures.

    python -m analysis runs/ --out analysis/out          # collect + tables + figures
    python -m analysis.collect runs/ --out analysis/out  # the table only

Modules: collect (run folders -> pandas), tables (Tables 2 and 3, time breakdown),
plots (figures), paper (the paper's published numbers), figures (the CLI),
callback (a Hydra callback that runs all of it at the end of a multirun).
"""

# Submodules are not imported here: `python -m analysis.collect` would then warn that the
# module is already in sys.modules, and `import analysis` stays free of matplotlib.
