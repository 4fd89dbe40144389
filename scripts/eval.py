"""Loss and bits/char of a trained tinylm checkpoint on a text file."""

import hydra
from omegaconf import DictConfig

from tinylm.evaluate import run


@hydra.main(version_base="1.3", config_path="pkg://tinylm.conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
