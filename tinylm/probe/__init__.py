"""The depth probe: a model experiment of its own (`scripts/probe.py`), not an analysis of runs: fresh blocks
of each placement, one batch, one backward pass, nothing trained (docs/probe.md)."""
