"""Training: `run(cfg)` as a pipeline (run.py) over settings checked once (settings.py), the LightningModule,
its callbacks, checkpoints, precision, scale-out and the sweeper's objective. Imports the model, data, layout
and overrides layers, never analysis, inference or the benchmarks."""
