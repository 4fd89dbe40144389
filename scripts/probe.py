"""The depth probe: `python scripts/probe.py norms=[pre,post,sandwich,on_branch] depth=32` (see README)."""

from omegaconf import DictConfig

from tinylm.analysis.probe import run
from tinylm.cli import hydra_entry_point


@hydra_entry_point(config_name="probe")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
