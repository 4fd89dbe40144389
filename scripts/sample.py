"""Sample text from a trained tinylm checkpoint or run directory: `python scripts/sample.py ckpt=latest`."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point


@hydra_entry_point(config_name="sample")
def main(cfg: DictConfig) -> None:
    from tinylm.inference.sample import run  # here, not above: --help and config errors need no torch

    run(cfg)


if __name__ == "__main__":
    main()
