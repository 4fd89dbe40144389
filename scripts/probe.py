"""The depth probe: `python scripts/probe.py norms=[pre,post,sandwich,on_branch] depth=32` (see README)."""

import hydra
from omegaconf import DictConfig

from tinylm.probe import run


@hydra.main(version_base="1.3", config_path="pkg://tinylm.conf", config_name="probe")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
