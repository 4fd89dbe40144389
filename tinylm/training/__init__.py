"""Training: the LightningModule, `run(cfg)`, callbacks, checkpoints, fault tolerance, precision, scale-out
and sweep jobs. Imports the model and data layers, never the analysis or benchmark code."""
