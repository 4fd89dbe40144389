"""Sample text from a trained tinylm checkpoint or run directory: `python scripts/sample.py ckpt=latest`."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point


# No Lightning: the checkpoint alone rebuilds the model, and importing Lightning costs seconds.
@hydra_entry_point(config_name="sample", uses_lightning=False)
def main(cfg: DictConfig) -> None:
    from tinylm.inference.sample import run  # here, not above: --help and config errors need no torch

    run(cfg)


if __name__ == "__main__":
    main()
