"""Benchmark tinylm's training path against a bare PyTorch loop: `python scripts/bench.py [--json] [overrides]`."""

import contextlib
import sys

import hydra
from omegaconf import DictConfig

from tinylm.bench import format_report, run, to_json

# `--json` is not Hydra syntax: take it off the command line before Hydra parses it.
AS_JSON = "--json" in sys.argv
if AS_JSON:
    sys.argv.remove("--json")


@hydra.main(version_base="1.3", config_path="pkg://tinylm.conf", config_name="bench")
def main(cfg: DictConfig) -> None:
    if AS_JSON:
        # Keep stdout for the JSON alone: the training run's progress and summaries go to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            result = run(cfg)
        print(to_json(result))
    else:
        print(format_report(run(cfg)))


if __name__ == "__main__":
    main()
