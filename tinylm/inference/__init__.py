"""Using a trained checkpoint: sampling text and evaluating loss on a file."""
