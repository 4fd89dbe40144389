"""Sample text from a trained tinylm checkpoint or run directory."""

import hydra
from omegaconf import DictConfig

from tinylm.sample import run


@hydra.main(version_base="1.3", config_path="pkg://tinylm.conf", config_name="sample")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
