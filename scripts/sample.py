"""Sample text from a trained tinylm checkpoint or run directory."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point
from tinylm.inference.sample import run


@hydra_entry_point(config_name="sample")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
