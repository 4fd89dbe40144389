"""Measure the health callback's cost on the training config: `python scripts/health_overhead.py
trainer.max_steps=600 threads=2 +repeats=2` (any train.py override applies; see docs/performance.md)."""

from omegaconf import DictConfig

from tinylm.cli import hydra_entry_point


@hydra_entry_point(config_name="train")
def main(cfg: DictConfig) -> None:
    from tinylm.bench.health_overhead import run

    run(cfg)


if __name__ == "__main__":
    main()
