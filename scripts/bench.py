"""Benchmark tinylm's training path against a bare PyTorch loop: `python scripts/bench.py [--json] [overrides]`."""

import contextlib
import sys

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point

# `--json` is not Hydra syntax: take it off the command line before Hydra parses it.
AS_JSON = "--json" in sys.argv
if AS_JSON:
    sys.argv.remove("--json")


@hydra_entry_point(config_name="bench")
def main(cfg: DictConfig) -> None:
    from tinylm.bench.bench import format_report, run, to_json

    if AS_JSON:
        # Keep stdout for the JSON alone: the training run's progress and summaries go to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            result = run(cfg)
        print(to_json(result))
    else:
        print(format_report(run(cfg)))


if __name__ == "__main__":
    main()
