"""Train tinylm: `python scripts/train.py norm=pre act=swiglu` (see README for every option)."""

import hydra
from omegaconf import DictConfig

from tinylm.train import run


@hydra.main(version_base="1.3", config_path="pkg://tinylm.conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    metrics = run(cfg)
    # Sweepers (Optuna) minimise what the task function returns.
    return metrics.get(cfg.optimized_metric) if cfg.get("optimized_metric") else None


if __name__ == "__main__":
    main()
