"""What a newcomer meets in the first hour (issue 37): a mistyped key or choice gets the nearest name, a sweep's
failed job is a failed row of its report, a sweep's runs are named by what varies, a short trial evaluates
what it trained for, and a sweep ends saying how to report it."""

from __future__ import annotations

import math
import re

import pytest
import tbparse
from conftest import REPO, SHRINK, compose_train, small_corpus
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from script_runner import run_script_in_process

from tinylm import checks, composition
from tinylm.analysis.present.write_report import write_report
from tinylm.analysis.runs import read_runs
from tinylm.data import CharDataModule, DataConfig
from tinylm.data.datamodule import FINAL_WINDOWS_PER_TRAINED_WINDOW
from tinylm.layout import (
    FINAL_SPLIT_WINDOWS,
    FINAL_VAL_LOSS,
    FINAL_WINDOW_LOSSES,
    HYDRA_DIR,
    target_tags,
    write_run_record,
)
from tinylm.overrides import run_label
from tinylm.training.run import RESUMED_AT, summary_line
from tinylm.training.sweep_record import SWEEP_RECORD, sweep_overrides

# --- 1 and 2: Hydra's composition errors name the nearest key or choice ----------------------------------


def _error_line(*args: str) -> str:
    result = run_script_in_process("train.py", *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["model.nlayers=2"], "error: model.nlayers is not a setting; did you mean model.n_layer?"),
        (["optim.lrr=1e-3"], "error: optim.lrr is not a setting; did you mean optim.lr?"),
        (["sed=1"], "error: sed is not a setting; did you mean seed?"),
        # A setting of another section, by its last part: the nested key to type.
        (["max_steps=100"], "error: max_steps is not a setting; did you mean trainer.max_steps?"),
        (["n_layers=2"], "error: n_layers is not a setting; did you mean model.n_layer?"),
        # Its exact last part before any near top-level name (it said: did you mean threads?).
        (["n_head=2"], "error: n_head is not a setting; did you mean model.n_head?"),
        # The section's keys are those of the group chosen: only data=text has `files`.
        (["data=text", "data.file=x.txt"], "error: data.file is not a setting; did you mean data.files?"),
        # A setting of another choice of its group: the choice to add, not a near name (optim.min_lr).
        (
            ["optim=adamw", "optim.muon_lr=1e-2"],
            "error: optim.muon_lr is a setting of optim=muon only: add optim=muon",
        ),
        (["data.files=x.txt"], "error: data.files is a setting of data=text only: add data=text"),
        # Nothing near: every setting of the section, as for tinylm's own sections.
        (
            ["model.zzz=1"],
            "error: model.zzz is not a setting; the settings are: act, bias, block_size, d_ff, d_model, ",
        ),
    ],
)
def test_a_mistyped_key_gets_the_nearest_setting_not_a_plus(tmp_path, args, line):
    got = _error_line(*args, f"hydra.run.dir={tmp_path / 'run'}")
    assert got.startswith(line), got
    assert "+" not in got  # Hydra's advice, `+model.nlayers=2`, adds a key that nothing reads
    assert not (tmp_path / "run").exists()


def test_a_bare_key_gets_the_nearest_of_every_sections_keys_not_of_the_top_level_alone():
    answer = composition.unknown_key("nhead", "pkg://tinylm.conf", "train", ["nhead=2"])
    assert answer == "nhead is not a setting; did you mean model.n_head?"  # it said: did you mean threads?


@pytest.mark.parametrize(
    ("args", "near", "listed"),
    [
        (
            ["norm=Pre"],
            "did you mean norm=pre?",
            "Available options in 'norm': on_branch; post; pre; sandwich",
        ),
        (["norm_type=RMS"], "did you mean norm_type=rms?", "Available options in 'norm_type': layer; rms"),
        (
            ["trainer=cpus"],
            "did you mean trainer=cpu?",
            "Available options in 'trainer': cpu; ddp; fsdp; gpu",
        ),
        (["-m", "act=gelu,swigl"], "did you mean act=swiglu?", "Available options in 'act': geglu; gelu;"),
        # Nothing near, or nothing typed: the list alone, as Hydra gives it.
        (["launcher=nope"], None, "Available options in 'launcher': joblib; slurm"),
        (["norm="], None, "Available options in 'norm': on_branch; post; pre; sandwich"),
    ],
)
def test_a_mistyped_choice_gets_the_nearest_one_and_the_list(tmp_path, args, near, listed):
    got = _error_line(*args, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert listed in got
    if near:
        assert f"': {near}; Available options" in got, got
    else:
        assert "did you mean" not in got, got
    assert not (tmp_path / "run").exists()


def test_hydras_two_messages_are_still_worded_as_tinylm_reads_them():
    """tinylm.composition reads Hydra's report: if a Hydra release rewords it, this fails (docs/internals.md)."""
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        with pytest.raises(MissingConfigException) as missing:
            compose("train", overrides=["norm=Pre"])
        with pytest.raises(ConfigCompositionException) as unknown:
            compose("train", overrides=["model.nlayers=2"])
    report = str(missing.value)
    found = composition.MISSING_CHOICE.search(report)
    assert found and (found["group"], found["choice"]) == ("norm", "Pre")
    listed = composition.OPTIONS.search(report)
    assert listed and listed["group"] == "norm"
    # The list read from the text is the list Hydra hands over as the exception's public `options`.
    assert [line.strip() for line in listed["options"].splitlines()] == list(missing.value.options)
    key = composition.UNKNOWN_KEY.search(str(unknown.value))
    assert key and key["key"] == "model.nlayers"


def test_nearest_ignores_case_and_names_nothing_far():
    assert checks.nearest("nlayers", ["n_layer", "n_head", "d_model"]) == "n_layer"
    assert checks.nearest("Pre", ["on_branch", "post", "pre", "sandwich"]) == "pre"
    assert checks.nearest("batch", ["layer", "rms"]) is None


# --- 3: a failed job is a failed row; the rest is reported ---------------------------------------------------


def _job(sweep, number, cfg, status, **fields):
    run_dir = sweep / f"{number}_job"
    (run_dir / HYDRA_DIR).mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / HYDRA_DIR / "config.yaml")
    overrides = [f"model.d_model={cfg.model.d_model}"]
    OmegaConf.save(OmegaConf.create(overrides), run_dir / HYDRA_DIR / "overrides.yaml")
    write_run_record(run_dir, status, **fields)
    return run_dir


def test_a_report_shows_a_job_refused_for_its_config_as_a_failed_row(tmp_path):
    # As `train.py -m model.n_head=4 model.d_model=32,30` leaves it: job 1 refused before training.
    sweep = tmp_path / "sweep"
    good = compose_train(tmp_path, ["model.n_head=4", "model.d_model=32"])
    bad = compose_train(tmp_path, ["model.n_head=4", "model.d_model=30"])
    losses = [3.0, 3.2, 3.1, 2.9]
    _job(sweep, 0, good, "completed", **{FINAL_VAL_LOSS: 3.05, FINAL_WINDOW_LOSSES: losses, "step": 6})
    error = (
        "ConfigError: model.d_model=30 must be divisible by n_head=4 (choose d_model a multiple of n_head)"
    )
    _job(sweep, 1, bad, "failed", error=error)

    runs = read_runs(sweep)
    assert [run.model is not None for run in runs] == [True, False]  # no model to rebuild from job 1
    text, written = write_report(sweep)
    assert all(path.is_file() for path in written)
    runs_table = text.split("## Runs", 1)[1]
    rows = {
        line.split(" | ")[1]: line
        for line in runs_table.splitlines()
        if line.startswith("| ") and "---" not in line
    }
    assert "| 3.0500 |" in rows["0"] and rows["0"].endswith("| completed |")
    assert (
        rows["1"].startswith("| — | 1 |")
        and "failed: ConfigError: model.d_model=30 must be divisible" in rows["1"]
    )
    # The depth probe beside the sweep still probes the shape that trained.
    probe = text.split("## At initialisation", 1)[1].split("##", 1)[0]
    assert "| pre | gelu | 2 | 32 |" in probe and "| 30 |" not in probe


# --- 4 and 6: a sweep's runs are named by what varies, and the sweep says how to report it ---------------


def test_a_sweeps_varying_and_shared_overrides():
    # The command line after the sweeper's params, as Hydra's sweepers read them: the later value wins.
    record = sweep_overrides(
        [
            "norm=pre,post",
            "act=gelu,swiglu",
            "seed=1,2",
            "experiment=norm_act_sweep",
            "trainer.max_steps=100",
        ],
        {"optim.lr": "tag(log, interval(1e-4, 1e-2))", "model.n_layer": "2,4", "trainer.max_steps": "50,60"},
    )
    assert record["varies"] == ["optim.lr", "model.n_layer", "norm", "act", "seed"]
    assert record["shared"] == ["trainer.max_steps=100", "experiment=norm_act_sweep"]
    job = ["optim.lr=0.003", "model.n_layer=2", "norm=pre", "act=gelu", "seed=1", "experiment=norm_act_sweep",
           "trainer.max_steps=100", "trainer.val_check_interval=50"]  # fmt: skip
    assert run_label(job, only=record["varies"]) == "norm=pre,act=gelu,seed=1,model.n_layer=2,optim.lr=0.003"


def test_a_sweeps_jobs_are_named_by_what_varies_and_it_ends_with_the_report_command(grid_sweep):
    # The shared 2×2 grid (conftest): `-m norm='glob(p*)' act=gelu,swiglu` with SHRINK and a small corpus.
    sweep_dir, result = grid_sweep
    assert result.returncode == 0, result.stderr[-3000:]
    names = sorted(path.name for path in sweep_dir.iterdir() if path.is_dir())
    assert names == [
        "0_norm=post,act=gelu",
        "1_norm=post,act=swiglu",
        "2_norm=pre,act=gelu",
        "3_norm=pre,act=swiglu",
    ]
    # What every job shares is recorded once, in the sweep's own record.
    record = OmegaConf.load(sweep_dir / SWEEP_RECORD)
    assert list(record.varies) == ["norm", "act"]
    assert {*SHRINK, "data=text"} <= set(record.shared)
    # HParams: whole numbers as typed (TensorBoard would show seed=1337 as 1337.0).
    columns = []
    for name in names:
        hparams = tbparse.SummaryReader(str(sweep_dir / name / "tb")).hparams
        columns.append(dict(zip(hparams.tag, hparams.value, strict=True)))
    values = columns[0]
    assert values["seed"] == "1337" and values["trainer.max_steps"] == "6" and values["act"] == "gelu"
    # Every config group's choice is a column of every job, the defaults too: TensorBoard lists first the
    # columns whose values differ, and `optim` carried by a muon run alone would have one value.
    design = {"model": "baby", "norm": "post", "norm_type": "layer", "act": "gelu", "optim": "adamw",
              "data": "text", "trainer": "cpu", "callbacks": "default"}  # fmt: skip
    assert {key: values.get(key) for key in design} == design
    assert not {"logger", "launcher", "hparams_search"} & set(values)  # how it ran, not what it is
    assert all(set(job) == set(values) for job in columns)
    # After the last job's `done:` line, where the sweep is and the command that reports it.
    lines = result.stdout.strip().splitlines()
    assert lines[-2].startswith("done: ")
    assert re.fullmatch(rf"sweep done: {re.escape(str(sweep_dir))}; report it: python \S*scripts/report.py "
                        rf"{re.escape(str(sweep_dir))}", lines[-1]), lines[-1]  # fmt: skip


# --- 5: the final evaluation in proportion to the training ---------------------------------------------------


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    corpus = small_corpus(tmp_path_factory.mktemp("corpus"))
    datamodule = CharDataModule(DataConfig(source="text", files=str(corpus), block_size=8, val_windows=200))
    datamodule.prepare()
    return datamodule


def test_the_final_evaluation_covers_up_to_4_windows_per_window_trained_on(small_data):
    available = (len(small_data.val_tokens) - 1) // 8
    assert FINAL_WINDOWS_PER_TRAINED_WINDOW == 4 and available > 400
    # A trial: 20 steps of 4 windows -> 320 of the split's windows; never fewer than the periodic validation's.
    assert len(small_data.final_windows(trained_windows=80)) == 320
    assert len(small_data.final_windows(trained_windows=6)) == 200
    # A real budget: the whole split, or data.final_val_windows where that is smaller (an upper bound).
    assert (
        len(small_data.final_windows(trained_windows=10_000))
        == available
        == small_data.final_windows().available
    )
    small_data.config.final_val_windows = 250
    try:
        assert len(small_data.final_windows(trained_windows=80)) == 250
        assert len(small_data.final_windows()) == 250
    finally:
        small_data.config.final_val_windows = DataConfig.final_val_windows


def test_the_summary_line_names_each_target_level_reached_with_its_step_and_training_time(tmp_path):
    """Issue 67: a run that reached `callbacks.targets.levels` (the speedrun's 1.88) said so only in
    metrics.json. The line names each level reached, its step and training time, and each not reached."""
    metrics = {"step": 210, "wall_time_s": 30.0, "chars_per_s": 4000.0, "loss/val": 1.85}
    for level, step, time_s in ((2.0, 120, 15.23), (1.88, 183, 24.08)):
        step_tag, time_tag = target_tags(level)
        metrics |= {step_tag: float(step), time_tag: time_s}

    def said(levels: list[float]) -> list[str]:
        return summary_line(metrics, tmp_path, tensorboard=False, targets=levels).split("; ")

    assert said([1.88])[2] == "validation loss reached 1.88 at step 183 (24.1 s of training)"
    assert said([2.0, 1.88, 1.7, 1.6])[2] == (
        "validation loss reached 2 at step 120 (15.2 s of training) and 1.88 at step 183 (24.1 s of training), "
        "not 1.7 or 1.6"
    )
    assert said([1.7])[2] == "validation loss did not reach 1.7"
    assert said([1.7, 1.6, 1.5])[2] == "validation loss did not reach 1.7, 1.6 or 1.5"
    assert said([])[2].startswith("checkpoint ")  # with no targets (~callbacks.targets), nothing about them


def test_the_summary_line_and_the_report_say_which_evaluation_a_loss_comes_from(tmp_path):
    metrics = {"step": 20, "wall_time_s": 3.0, "chars_per_s": 4000.0, "loss/val": 3.7, FINAL_VAL_LOSS: 3.69,
               FINAL_WINDOW_LOSSES: [3.69] * 960, FINAL_SPLIT_WINDOWS: 7477}  # fmt: skip
    line = summary_line(metrics, tmp_path, tensorboard=False)
    # The result is named once, first; the periodic validation's loss is named for what it is.
    assert "; final loss 3.6900 nats/char = 5.324 bits/char on 960 of 7,477 validation windows; " in line
    assert "; last periodic validation 3.7000; " in line
    metrics[FINAL_SPLIT_WINDOWS] = 960
    line = summary_line(metrics, tmp_path, tensorboard=False)
    assert "final loss 3.6900 nats/char = 5.324 bits/char on all 960 validation windows" in line
    # Resumed through `latest`, the line names the run's own directory: the link moves with the next run.
    (tmp_path / "run").mkdir()
    (tmp_path / "latest").symlink_to(tmp_path / "run")
    line = summary_line(metrics, tmp_path / "latest", tensorboard=True)
    real = (tmp_path / "run").resolve()
    assert f"; checkpoint {real / 'checkpoints' / 'last.ckpt'}; tensorboard --logdir {real / 'tb'}" in line
    # Resumed in place, the time and speed are the new segment's, and the line says so.
    assert line.startswith("done: 20 steps in 0m03s (4,000 chars/s); ")
    line = summary_line(metrics | {RESUMED_AT: 15}, tmp_path, tensorboard=False)
    assert line.startswith("done: 20 steps, the 5 since the resume at step 15 in 0m03s (4,000 chars/s); ")

    sweep = tmp_path / "sweep"
    cfg = compose_train(tmp_path, [])
    _job(sweep, 0, cfg, "completed", **{FINAL_VAL_LOSS: 3.69, FINAL_WINDOW_LOSSES: [3.69] * 960,
                                        FINAL_SPLIT_WINDOWS: 7477, "step": 20})  # fmt: skip
    _job(sweep, 1, cfg, "completed", **{"loss/val": 3.8, "step": 20})  # recorded before the final evaluation
    evaluated = [run.evaluated for run in read_runs(sweep)]
    assert evaluated == ["final, 960 of 7,477 validation windows", "last validation"]
    assert math.isclose(read_runs(sweep)[1].final_val_loss, 3.8)


# --- the README's first commands and train.py --help, as a newcomer meets them -------------------------------


def _readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readmes_install_block_applies_the_cpu_wheels_index_when_copied():
    blocks = [block.splitlines() for block in re.findall(r"```bash\n(.*?)```", _readme(), flags=re.DOTALL)]
    install = next(block for block in blocks if any('-e ".[dev]"' in line for line in block))
    # A comment is skipped by the shell: the index must be in a command, before the package's install.
    commands = [line.split("#")[0] for line in install if not line.lstrip().startswith("#")]
    cpu = [i for i, line in enumerate(commands) if "download.pytorch.org/whl/cpu" in line]
    dev = next(i for i, line in enumerate(commands) if '-e ".[dev]"' in line)
    assert cpu and cpu[0] < dev, install


def test_the_readmes_held_out_file_goes_where_git_ignores_it():
    readme = _readme()
    written = re.findall(r"open\('([^']+)', 'w'\)", readme)
    ignored = {line.strip() for line in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()}
    assert written
    for path in written:
        # Not a new file in the repository's root, which `git status` would show.
        assert "/" in path and f"{path.split('/')[0]}/" in ignored, path
        assert f"file={path}" in readme


def test_train_help_opens_with_what_it_does_and_where_every_option_is():
    # Hydra's help config: its template opens with the header, which said only "train is powered by Hydra.".
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        help_config = compose("train", return_hydra_config=True).hydra.help
    assert OmegaConf.to_container(help_config)["template"].startswith("${hydra.help.header}")
    assert help_config.header.startswith("train.py trains") and "docs/cli.md" in help_config.header
    assert (REPO / "docs" / "cli.md").is_file()


@pytest.mark.slow  # Hydra's --help lists every group's options: seconds
def test_train_help_as_printed():
    result = run_script_in_process("train.py", "--help")
    assert result.returncode == 0, result.stderr
    first = result.stdout.split("\n\n")[0]
    assert first.startswith("train.py trains") and "docs/cli.md" in first, first
    assert "== Configuration groups ==" in result.stdout  # Hydra's lists follow


# The other Hydra scripts: each said only "<script> is powered by Hydra." before its lists.
HELPS = {"eval": "eval.py reports", "sample": "sample.py prints", "probe": "probe.py builds"}


@pytest.mark.parametrize("script", sorted(HELPS))
def test_help_opens_with_the_usage_and_what_the_script_does(script):
    with initialize_config_module("tinylm.conf", version_base="1.3"):
        help_config = compose(script, return_hydra_config=True).hydra.help
    template = OmegaConf.to_container(help_config)["template"]
    usage, does = help_config.header.split("\n\n")[:2]
    assert template.startswith("${hydra.help.header}")
    assert usage.startswith(f"usage: python scripts/{script}.py ") and "\n" not in usage, usage
    assert does.startswith(HELPS[script]) and "docs/" in does, does
    # eval and sample take none of train.py's groups, which Hydra would list: their help lists none
    assert ("$APP_CONFIG_GROUPS" in template) == (script == "probe")


@pytest.mark.slow  # as train.py's: seconds a script
@pytest.mark.parametrize("script", sorted(HELPS))
def test_help_as_printed(script):
    result = run_script_in_process(f"{script}.py", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python scripts/{script}.py "), result.stdout[:300]
    assert result.stdout.split("\n\n")[1].startswith(HELPS[script])
    assert "powered by Hydra" not in result.stdout.split("== Config")[0]
    assert "\n== Config ==\n" in result.stdout  # the settings, as Hydra lists them, follow
