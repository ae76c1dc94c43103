"""Benchmarks: run and time training stages, measure inference speed, draw the plots and
write the report (BENCHMARKS.md + JSON) of the project's `benchmark` workflow; its
command line is `python -m spacy_maral.bench` (`cli`: measure, benchmark-report,
parallel)."""
