"""Train tinylm: `python scripts/train.py norm=pre act=swiglu` (see README for every option).

Sweeps: `python scripts/train.py -m norm=pre,post act=gelu,swiglu` (README, "Sweeps").
"""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point
from tinylm.training.sweep import run_job


@hydra_entry_point(config_name="train")
def main(cfg: DictConfig) -> float | None:
    # The optimized metric, for sweepers (Optuna minimises it); in a multirun a failing job returns
    # instead of raising, so the sweep goes on.
    return run_job(cfg)


if __name__ == "__main__":
    main()
