"""Train tinylm: `python scripts/train.py norm=pre act=swiglu` (see README for every option)."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point
from tinylm.train import run


@hydra_entry_point(config_name="train")
def main(cfg: DictConfig) -> float | None:
    metrics = run(cfg)
    # Sweepers (Optuna) minimise what the task function returns.
    return metrics.get(cfg.optimized_metric) if cfg.get("optimized_metric") else None


if __name__ == "__main__":
    main()
