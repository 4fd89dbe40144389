"""Adding seeds to a finished sweep until its comparisons are resolved (`scripts/add_seeds.py`): `plan` decides
each round from the sweep's report (tinylm.analysis), `rounds` starts its runs (tinylm.training) and looks
again. The one part of tinylm that uses both the analysis and training."""
