"""What a run shows and why: the depth probe, training-health curves and the sweep report."""
