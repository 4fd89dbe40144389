"""Using a trained checkpoint without Lightning: `load_model` rebuilds the `GPT` and its tokenizer from the
file alone, `sample_text` draws text from them, `evaluate_text`/`evaluate_tokens` measure the loss."""
