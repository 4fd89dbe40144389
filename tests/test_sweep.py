"""Sweeps through the real scripts: a grid multirun, the Optuna search with SQLite storage and its resume, the
joblib launcher running jobs side by side, the SLURM preset's composition, and failing jobs that do not stop
a sweep."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import tbparse
import tinylm.conf
from conftest import job_cfg, run_sweep, script_objective, small_corpus, sweep_args
from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf
from script_runner import run_script_in_process

import tinylm.training.run
from tinylm.errors import ConfigError
from tinylm.layout import read_run_record
from tinylm.model import GPT, ModelConfig
from tinylm.training.distributed import ScaleOutError
from tinylm.training.resolvers import threads_per_job


def _run_dirs(sweep_dir: Path) -> list[Path]:
    return sorted(p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml"))


def _tensorboard_runs(run_dir: Path) -> list[Path]:
    return [p for p in (run_dir / "tb").iterdir() if p.is_dir()]


# --- a grid: every combination in its own directory, with its own TensorBoard run ----------------------


def test_grid_multirun_gives_every_combination_its_own_run_dir_and_tensorboard_run(grid_sweep):
    sweep_dir, result = grid_sweep
    assert result.returncode == 0, result.stderr[-3000:]
    run_dirs = _run_dirs(sweep_dir)
    assert len(run_dirs) == 4
    # norm='glob(p*)' expanded to the two placements starting with p
    combos = {(c.model.norm, c.model.act) for c in (OmegaConf.load(d / "config.yaml") for d in run_dirs)}
    assert combos == {("pre", "gelu"), ("pre", "swiglu"), ("post", "gelu"), ("post", "swiglu")}

    names = []
    for run_dir in run_dirs:
        config = OmegaConf.load(run_dir / "config.yaml")
        # The job directory carries the run's name; its events go straight into <job>/tb, so that
        # TensorBoard's run names (and HParams' trial ids) over the sweep say it once.
        names.append(run_dir.name)
        assert f"norm={config.model.norm}" in run_dir.name.split("_", 1)[1].split(",")
        assert f"act={config.model.act}" in run_dir.name.split(",")
        tb_run = run_dir / "tb"
        assert list(tb_run.glob("events.out.tfevents.*")) and not _tensorboard_runs(run_dir)
        scalars = tbparse.SummaryReader(str(tb_run)).scalars
        assert set(scalars[scalars.tag == "loss/val"].step) == {3, 6}
        record = read_run_record(run_dir)
        assert record["status"] == "completed" and record["step"] == 6
        assert record["loss/val"] == pytest.approx(float(scalars[scalars.tag == "loss/val"].value.iloc[-1]))
    assert len(set(names)) == 4
    # Hydra's job number keeps directory names apart even if two labels were cut to the same prefix.
    assert sorted(int(d.name.split("_")[0]) for d in run_dirs) == [0, 1, 2, 3]


def test_failing_jobs_are_recorded_and_the_sweep_goes_on(tmp_path):
    # n_head=3 does not divide d_model=32: that job fails while building the model; the other one trains.
    sweep_dir, result = run_sweep(tmp_path, "model.n_head=3,2")
    assert result.returncode == 0, result.stderr[-3000:]
    records = {read_run_record(d)["status"]: read_run_record(d) for d in _run_dirs(sweep_dir)}
    assert set(records) == {"failed", "completed"}
    assert "divisible by n_head=3" in records["failed"]["error"]
    output = result.stdout + result.stderr
    # The config error in one line, as a single run reports it (a bug keeps its traceback: below).
    assert "failed: model.d_model=32 must be divisible by n_head=3" in output
    assert "the sweep goes on" in output and "Traceback" not in output
    # the job after the failure still ran
    assert math.isfinite(records["completed"]["loss/val"])


# --- run_job: what a sweeper gets back ----------------------------------------------------------------


@pytest.fixture
def fake_run(monkeypatch):
    """Replace training in tinylm.training.run with a run that passes its checks, then raises or returns
    what the test says."""

    def install(outcome):
        def fit():
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        monkeypatch.setattr(tinylm.training.run, "prepare", lambda cfg, *passed: SimpleNamespace(fit=fit))

    return install


def test_run_job_returns_the_optimized_metric(tmp_path, fake_run):
    fake_run({"loss/val": 1.25, "loss/train": 1.0})
    assert script_objective(job_cfg(tmp_path)) == 1.25


@pytest.mark.parametrize(
    ("error", "status", "returned"),
    [
        (FloatingPointError("loss is nan at step 7"), "diverged", math.inf),
        (ValueError("bad config"), "failed", None),
        (RuntimeError("boom"), "failed", None),
    ],
)
def test_run_job_in_a_sweep_records_a_failure_and_returns(
    tmp_path, fake_run, caplog, error, status, returned
):
    fake_run(error)
    assert script_objective(job_cfg(tmp_path), keep_going=True) == returned
    (logged,) = [r for r in caplog.records if "the sweep goes on" in r.getMessage()]
    assert logged.exc_info is not None  # not one of tinylm's reported errors: logged with its traceback
    record = read_run_record(tmp_path)
    assert record["status"] == status
    assert record["error"] == f"{type(error).__name__}: {error}"


def test_a_reported_error_in_a_sweep_is_logged_as_one_line(tmp_path, fake_run, caplog):
    fake_run(ConfigError("model.d_model=30 must be divisible by n_head=4"))
    assert script_objective(job_cfg(tmp_path), keep_going=True) is None
    (logged,) = [r for r in caplog.records if "the sweep goes on" in r.getMessage()]
    assert logged.exc_info is None
    assert logged.getMessage() == (
        "run test failed: model.d_model=30 must be divisible by n_head=4; the sweep goes on"
    )


def test_run_job_single_run_records_and_reraises(tmp_path, fake_run):
    fake_run(ValueError("bad config"))
    with pytest.raises(ValueError, match="bad config"):
        script_objective(job_cfg(tmp_path), keep_going=False)
    assert read_run_record(tmp_path)["status"] == "failed"


def test_run_job_stops_the_sweep_on_an_error_every_job_would_hit(tmp_path, fake_run):
    fake_run(ScaleOutError("-m (a sweep) with trainer.strategy=DDPStrategy on 2 devices"))
    with pytest.raises(ScaleOutError):
        script_objective(job_cfg(tmp_path), keep_going=True)
    assert read_run_record(tmp_path)["status"] == "failed"


def test_run_job_treats_a_non_finite_objective_as_divergence(tmp_path, fake_run):
    fake_run({"loss/val": math.nan, "step": 6})
    assert script_objective(job_cfg(tmp_path), keep_going=True) == math.inf
    record = read_run_record(tmp_path)
    assert record["status"] == "diverged" and math.isnan(record["loss/val"])


def test_run_job_outside_hydra_is_a_single_run(tmp_path, fake_run):
    fake_run(RuntimeError("boom"))
    with pytest.raises(RuntimeError):
        script_objective(job_cfg(tmp_path))


# --- Optuna: a search kept in SQLite, resumed by a second invocation --------------------------------------


def _optuna_search(root: Path, invocation: str, n_trials: int) -> tuple[Path, str]:
    sweep_dir, result = run_sweep(
        root,
        "hparams_search=optuna",
        f"hydra.sweeper.n_trials={n_trials}",
        f"hydra.sweeper.storage=sqlite:///{root / 'study' / 'optuna.db'}",
        name=invocation,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir, result.stdout + result.stderr


def test_optuna_search_with_sqlite_storage_resumes_the_same_study(tmp_path):
    first_dir, _ = _optuna_search(tmp_path, "first", n_trials=2)
    storage = f"sqlite:///{tmp_path / 'study' / 'optuna.db'}"  # its directory was created for it
    study = optuna.load_study(study_name="tinylm", storage=storage)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2

    second_dir, output = _optuna_search(tmp_path, "second", n_trials=1)
    summaries = optuna.get_all_study_summaries(storage=storage)
    assert [s.study_name for s in summaries] == ["tinylm"]  # resumed, not a second study
    study = optuna.load_study(study_name="tinylm", storage=storage)
    assert len(study.trials) == 3
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert "Study name: tinylm" in output

    # Each trial's value is the final loss/val_full its own run recorded; every run has its own directory.
    run_dirs = _run_dirs(first_dir) + _run_dirs(second_dir)
    assert len(run_dirs) == len(set(run_dirs)) == 3
    recorded = sorted(read_run_record(d)["loss/val_full"] for d in run_dirs)
    assert sorted(t.value for t in study.trials) == pytest.approx(recorded)
    # The preset's search space was sampled, except what the command line fixed (SHRINK's warmup_steps=2).
    for trial in study.trials:
        assert set(trial.params) == {"optim.lr", "optim.weight_decay", "norm", "act"}
        assert 3e-4 <= trial.params["optim.lr"] <= 3e-3
        assert trial.user_attrs["optim.warmup_steps"] == "2"
    for run_dir in run_dirs:
        assert OmegaConf.load(run_dir / "config.yaml").optim.warmup_steps == 2


def test_a_failing_optuna_trial_is_recorded_as_failed_and_the_search_goes_on(tmp_path):
    # Only n_head searched (the preset's space cleared): n_head=3 cannot divide d_model=32, n_head=2 trains.
    # The random sampler with seed 10 draws 3, then 2: the failure comes first and the search must go on.
    # (Hydra's grid sampler would be the obvious choice, but it crashes when its last trial fails.)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    result = run_script_in_process(
        "train.py",
        "-m",
        "hparams_search=optuna",
        "hydra/sweeper/sampler=random",
        "hydra.sweeper.sampler.seed=10",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.params=null",
        f"hydra.sweeper.storage={storage}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        # a fixed value would take n_head out of the search, whatever the order: drop SHRINK's
        *(a for a in sweep_args(small_corpus(tmp_path)) if not a.startswith("model.n_head=")),
        "model.n_head=choice(3, 2)",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    study = optuna.load_study(study_name="tinylm", storage=storage)
    trials = [(t.params["model.n_head"], t.state) for t in study.trials]
    assert trials == [(3, optuna.trial.TrialState.FAIL), (2, optuna.trial.TrialState.COMPLETE)]
    assert study.best_trial.params["model.n_head"] == 2


# --- launchers ---------------------------------------------------------------------------------------------


def test_joblib_launcher_runs_jobs_side_by_side_without_sharing_a_write_path(tmp_path):
    sweep_dir, result = run_sweep(tmp_path, "launcher=joblib", "hydra.launcher.n_jobs=2", "act=gelu,swiglu")
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"Joblib\.Parallel\(n_jobs=2.*\) is launching 2 jobs", result.stdout + result.stderr)

    run_dirs = _run_dirs(sweep_dir)
    assert len(run_dirs) == 2
    writers = set()
    for run_dir in run_dirs:
        assert read_run_record(run_dir)["status"] == "completed"
        # every job has its own checkpoints and TensorBoard run, inside its own directory
        assert (run_dir / "checkpoints" / "last.ckpt").is_file()
        (events,) = (run_dir / "tb").glob("events.out.tfevents.*")
        writers.add(events.name.split(".")[-2])  # events.out.tfevents.<time>.<host>.<pid>.<n>
        assert OmegaConf.load(run_dir / "config.yaml").threads == threads_per_job(2)
    assert len(writers) == 2  # two worker processes, one per job


def _compose_with_hydra(overrides: list[str]):
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


@pytest.fixture
def hydra_runtime():
    """Hydra's runtime config, set as @hydra.main sets it, and cleared after: later tests run outside Hydra."""
    yield HydraConfig.instance().set_config
    HydraConfig.instance().cfg = None


def test_joblib_preset_shares_the_cores_out(hydra_runtime):
    cfg = _compose_with_hydra(["launcher=joblib", "hydra.launcher.n_jobs=2"])
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    hydra_runtime(cfg)
    assert cfg.threads == threads_per_job(2) >= 1


def test_threads_per_job_divides_the_cores(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(8)), raising=False)
    assert [threads_per_job(n) for n in (1, 2, 3, 8, 16, -1, None)] == [8, 4, 2, 1, 1, 1, 1]


def test_slurm_preset_composes_with_sensible_parameters(hydra_runtime):
    # tests/test_ddp.py checks the sbatch parameters it generates, multi-node DDP included.
    cfg = _compose_with_hydra(
        ["launcher=slurm", "hydra.launcher.partition=cpu", "hydra.sweep.dir=/scratch/sweep", "norm=post"]
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher.partition == "cpu"
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (1, 1, None)  # trainer=cpu
    assert launcher.cpus_per_task >= 1 and launcher.timeout_min >= 1
    assert launcher.submitit_folder == "/scratch/sweep/.submitit/%j"
    hydra_runtime(cfg)
    assert cfg.threads == launcher.cpus_per_task  # one torch thread per CPU SLURM grants
    assert cfg.model.norm == "post"


def test_optuna_preset_composes_a_minimising_persistent_search():
    cfg = _compose_with_hydra(["hparams_search=optuna"])
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "minimize" and cfg.optimized_metric == "loss/val_full"
    assert sweeper.storage == "sqlite:///runs/optuna/tinylm/optuna.db"
    assert cfg.hydra.sweep.dir.startswith("runs/optuna/tinylm/")
    assert set(sweeper.params) == {"optim.lr", "optim.warmup_steps", "optim.weight_decay", "norm", "act"}
    assert sweeper.max_failure_rate == 1.0


def test_norm_act_sweep_preset_is_a_fair_grid_over_every_placement():
    cfg = _compose_with_hydra(["experiment=norm_act_sweep"])
    params = cfg.hydra.sweeper.params
    placements = {p.stem for p in (Path(tinylm.conf.__file__).parent / "norm").glob("*.yaml")}
    assert set(params.norm.split(",")) == placements
    assert set(params.act.split(",")) == {"gelu", "swiglu"}
    assert cfg.seed == 1337 and cfg.trainer.max_steps == 300

    # d_ff is derived per FFN, so GELU and SwiGLU models of the preset's size match in parameters.
    model = {k: v for k, v in OmegaConf.to_container(cfg.model, resolve=True).items()}
    counts = {
        act: GPT(ModelConfig(**{**model, "act": act, "vocab_size": 65})).num_params()
        for act in ("gelu", "swiglu")
    }
    assert model["d_ff"] is None
    assert abs(counts["swiglu"] - counts["gelu"]) / counts["gelu"] < 0.005


def test_the_design_presets_train_with_muon_annealed_to_its_floor_and_the_old_recipe_is_one_flag_away():
    cfg = _compose_with_hydra(["experiment=swiglu_vs_gelu"])
    steps = cfg.trainer.max_steps
    assert (cfg.optim.name, steps, cfg.data.batch_size) == ("muon", 300, 48)
    assert cfg.optim.decay_steps == steps and cfg.optim.min_lr == pytest.approx(cfg.optim.lr / 10)
    assert cfg.trainer.val_check_interval <= 0.05 * steps  # the step a loss is reached, to 5% of the run
    assert cfg.hydra.sweeper.params["optim.lr"] == "1e-3,2e-3,4e-3"  # the recipe's rates
    assert cfg.optim.muon_lr == pytest.approx(3.5 * cfg.optim.lr)

    old = _compose_with_hydra(["experiment=swiglu_vs_gelu", "recipe=adamw_600"])
    assert (old.optim.name, old.trainer.max_steps, old.data.batch_size, old.optim.warmup_steps) == (
        "adamw",
        600,
        12,
        100,
    )
    assert old.trainer.val_check_interval == 100 and old.hydra.sweeper.params["optim.lr"] == "1e-3,3e-3,1e-2"


@pytest.mark.parametrize(
    ("recipe", "rates", "lr", "warmup"),
    [("muon_300", "2e-3,8e-3,3.2e-2", 2e-3, 20), ("adamw_600", "3e-3,1e-2,3e-2,1e-1", 3e-3, 100)],
)
def test_the_qk_norm_and_warmup_presets_take_their_rates_and_warmup_from_the_recipe(
    recipe, rates, lr, warmup
):
    """Under recipe=adamw_600 each runs as its stored 600-step report ran; under muon_300 at the new budget."""
    qk = _compose_with_hydra(["experiment=qk_norm_stability", f"recipe={recipe}"])
    assert qk.hydra.sweeper.params["optim.lr"] == rates
    ablation = _compose_with_hydra(["experiment=warmup_ablation", f"recipe={recipe}"])
    assert ablation.optim.lr == pytest.approx(lr)
    assert ablation.hydra.sweeper.params["optim.warmup_steps"] == f"0,{warmup}"
    assert ablation.baseline == f"optim.warmup_steps={warmup}"


@pytest.mark.parametrize("optim", ["adamw", "muon"])
def test_the_optimizer_budget_trains_both_optimizers_on_the_recipes_budget(optim):
    """Muon against AdamW at the design presets' budget: one recipe (steps, batch, warm-up, schedule) for both,
    and each optimizer's own parameters from its group."""
    cfg = _compose_with_hydra(["experiment=optimizer_budget", f"optim={optim}", "optim.lr=4e-3"])
    assert (cfg.optim.name, cfg.trainer.max_steps, cfg.data.batch_size, cfg.optim.warmup_steps) == (
        optim,
        300,
        48,
        20,
    )
    assert cfg.optim.min_lr == pytest.approx(4e-4) and cfg.optim.decay_steps == 300
    assert cfg.optim.name != "muon" or cfg.optim.muon_lr == pytest.approx(1.4e-2)
    assert cfg.hydra.sweeper.params["optim.lr"] == "1e-3,2e-3,4e-3"


@pytest.mark.parametrize("optim", ["adamw", "muon"])
def test_the_optimizer_ladder_pins_the_recipe_its_stored_reports_ran(optim):
    """The main job's Muon recipe (conf/optim/muon.yaml) is not the preset's: both optimizers keep the warm-up,
    steps and batch docs/results/optimizer_ladder* ran with (norm_act_sweep's, which it builds on)."""
    cfg = _compose_with_hydra(["experiment=optimizer_ladder", f"optim={optim}", "optim.lr=3e-3"])
    assert (cfg.optim.warmup_steps, cfg.trainer.max_steps, cfg.data.batch_size) == (100, 2000, 12)
    assert cfg.optim.name != "muon" or cfg.optim.muon_lr == pytest.approx(9e-3)


@pytest.mark.parametrize(
    "preset", sorted(p.stem for p in (Path(tinylm.conf.__file__).parent / "experiment").glob("*.yaml"))
)
def test_each_presets_baseline_and_ladder_name_choices_its_sweep_varies(preset):
    """The report judges against `baseline:` along `ladder:`; a key the sweep does not vary would stop it."""
    cfg = _compose_with_hydra([f"experiment={preset}"])
    params = cfg.hydra.sweeper.params or {}  # a single-run preset sweeps nothing
    varied = {key for key, values in params.items() if "," in str(values)}
    named = [part.split("=")[0] for part in (cfg.baseline or "").split(",") if part]
    axis = [key for key in (cfg.ladder or "").split(",") if key]
    assert set(named) <= varied and set(axis) <= varied, (named, axis, varied)
    assert not set(named) & set(axis)  # the baseline names a design, judged at every level
    assert named or not axis
