"""Measure the health callback's cost on the training config: `python scripts/health_overhead.py
trainer.max_steps=600 threads=2 +repeats=2` (any train.py override applies; see README)."""

import hydra
from omegaconf import DictConfig

from tinylm.health_overhead import run


@hydra.main(version_base="1.3", config_path="pkg://tinylm.conf", config_name="train")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
