"""Loss and bits/char of a trained tinylm checkpoint on a text file: `python scripts/eval.py ckpt=... file=...`."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point


# No Lightning: the checkpoint alone rebuilds the model, and importing Lightning costs seconds.
@hydra_entry_point(config_name="eval", uses_lightning=False)
def main(cfg: DictConfig) -> None:
    from tinylm.inference.evaluate import run  # here, not above: --help and config errors need no torch

    run(cfg)


if __name__ == "__main__":
    main()
