"""The depth probe: `python scripts/probe.py norms=[pre,post,sandwich,on_branch] depth=32` (docs/probe.md)."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point


@hydra_entry_point(config_name="probe", uses_lightning=False)
def main(cfg: DictConfig) -> None:
    from tinylm.probe.depth import run  # here, not above: --help and config errors need no torch

    run(cfg)


if __name__ == "__main__":
    main()
