"""Loss and bits/char of a trained tinylm checkpoint on a text file: `python scripts/eval.py ckpt=... file=...`."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point


@hydra_entry_point(config_name="eval")
def main(cfg: DictConfig) -> None:
    from tinylm.inference.evaluate import run  # here, not above: --help and config errors need no torch

    run(cfg)


if __name__ == "__main__":
    main()
