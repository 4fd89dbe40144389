"""Train tinylm: `python scripts/train.py norm=pre act=swiglu` (docs/cli.md has every option).

Sweeps: `python scripts/train.py -m norm=pre,post act=gelu,swiglu` (docs/sweeps.md).
"""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point
from tinylm.training.early_checks import EarlySettings, check_before_imports


@hydra_entry_point(config_name="train", check=check_before_imports)
def main(cfg: DictConfig, early: EarlySettings) -> float | None:
    from tinylm.training.run import objective  # here, not above: --help and config errors need no torch

    # The optimized metric, for sweepers (Optuna minimises it); in a multirun a failing job returns
    # instead of raising, so the sweep goes on. `early`: the settings checked before torch loaded.
    return objective(cfg, early=early)


if __name__ == "__main__":
    main()
