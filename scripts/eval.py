"""Loss and bits/char of a trained tinylm checkpoint on a text file."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point
from tinylm.inference.evaluate import run


@hydra_entry_point(config_name="eval")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
