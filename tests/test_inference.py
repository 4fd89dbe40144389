"""tinylm.inference without a training run: checkpoints are written here as training writes them (the
LightningModule's state dict, its `model.`-prefixed GPT weights, `hyper_parameters.model`, the tokenizer).
The comparison with Lightning's own loader on a trained run is in test_train.py."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from conftest import PickledCode

from tinylm.data import CharTokenizer
from tinylm.errors import ConfigError
from tinylm.inference.evaluate import evaluate_text
from tinylm.inference.trained import load_model
from tinylm.layout import CheckpointError
from tinylm.model import GPT, ModelConfig
from tinylm.model.sampling import sample_text

TEXT = "to be, or not to be: that is the question.\n" * 4
TOKENIZER = CharTokenizer.from_text(TEXT)


def tiny_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    values = dict(
        vocab_size=TOKENIZER.vocab_size, block_size=8, n_layer=2, n_head=2, d_model=16, act="swiglu"
    )
    return GPT(ModelConfig(**{**values, **overrides}))


def write_checkpoint(path: Path, gpt: GPT, **replace) -> Path:
    contents = {
        "global_step": 4,
        "state_dict": {f"model.{name}": value for name, value in gpt.state_dict().items()},
        "hyper_parameters": {"model": gpt.config.to_dict(), "sample_chars": 0},
        "tokenizer": TOKENIZER.to_dict(),
        **replace,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({key: value for key, value in contents.items() if value is not None}, path)
    return path


def test_load_model_rebuilds_the_gpt_and_its_tokenizer(tmp_path):
    gpt = tiny_gpt()
    path = write_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", gpt)
    trained = load_model(tmp_path / "run")  # a run directory: its checkpoints/last.ckpt
    assert (trained.path, trained.step, trained.config) == (path, 4, gpt.config)
    assert trained.tokenizer.chars == TOKENIZER.chars and not trained.gpt.training
    idx = torch.randint(0, TOKENIZER.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(trained.gpt(idx)[0], gpt.eval()(idx)[0])


def test_sample_text_streams_reproducibly_and_restores_the_mode():
    gpt = tiny_gpt().train()
    seen: list[str] = []
    text = sample_text(gpt, TOKENIZER, 20, "to", temperature=1.0, top_k=None, seed=3, on_char=seen.append)
    assert gpt.training and len(text) == 20 and "".join(seen) == text
    assert sample_text(gpt.eval(), TOKENIZER, 20, "to", temperature=1.0, top_k=None, seed=3) == text
    assert not gpt.training
    assert sample_text(gpt, TOKENIZER, 5, None, seed=0)  # the tokenizer's default prompt, a line break
    with pytest.raises(ConfigError, match="at least one character"):
        sample_text(gpt, TOKENIZER, 5, "")


def test_evaluate_text_restores_the_mode():
    gpt = tiny_gpt().train()
    metrics = evaluate_text(gpt, TOKENIZER, TEXT, batch_size=3)
    assert gpt.training and metrics["windows"] == (len(TEXT) - 1) // 8


def test_weights_that_do_not_fit_their_config_are_named(tmp_path):
    weights = {f"model.{name}": value for name, value in tiny_gpt().state_dict().items()}
    del weights["model.blocks.1.ffn.sublayer.up.weight"]
    weights["model.extra"] = torch.zeros(1)
    path = write_checkpoint(tmp_path / "odd.ckpt", tiny_gpt(), state_dict=weights)
    with pytest.raises(CheckpointError, match="do not fit its own model config") as error:
        load_model(path)
    assert "missing blocks.1.ffn.sublayer.up.weight; unexpected extra" in str(error.value)
    config = {"model": tiny_gpt().config.to_dict()}
    wider = write_checkpoint(tmp_path / "wider.ckpt", tiny_gpt(d_model=32), hyper_parameters=config)
    with pytest.raises(CheckpointError, match="misshapen"):
        load_model(wider)


def test_a_checkpoint_without_a_tokenizer_is_refused(tmp_path):
    path = write_checkpoint(tmp_path / "bare.ckpt", tiny_gpt(), tokenizer=None)
    with pytest.raises(CheckpointError, match="carries no tokenizer"):
        load_model(path)


def test_a_checkpoint_with_pickled_code_is_never_run(tmp_path):
    evil = tmp_path / "evil.ckpt"
    contents = {"state_dict": {}, "hyper_parameters": {"model": PickledCode(tmp_path / "PWNED")}}
    torch.save(contents, evil, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_model(evil)
    assert not (tmp_path / "PWNED").exists()


def fake_sharded_checkpoint(path: Path) -> Path:
    """What Lightning's FSDPStrategy.save_checkpoint writes with state_dict_type="sharded": a directory with
    torch.distributed.checkpoint's `.metadata` and `__<rank>_<n>.distcp` shards, and `meta.pt`."""
    path.mkdir(parents=True)
    torch.save({"global_step": 4}, path / "meta.pt")
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp"):
        (path / name).write_bytes(b"")
    return path


@pytest.mark.parametrize("given", ["the directory", "its run directory", "its checkpoints directory"])
def test_a_sharded_fsdp_checkpoint_is_refused_with_the_command_that_consolidates_it(tmp_path, given):
    sharded = fake_sharded_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    ckpt = {"the directory": sharded, "its run directory": tmp_path / "run"}.get(given, sharded.parent)
    with pytest.raises(CheckpointError) as error:
        load_model(ckpt)
    assert str(error.value) == (
        f"checkpoint {str(sharded)!r} is a sharded FSDP checkpoint (a directory of shards, saved with "
        "state_dict_type='sharded'); consolidate it into one file first: python -m "
        f"lightning.pytorch.utilities.consolidate_checkpoint {str(sharded)!r} (it writes "
        f"{str(sharded) + '.consolidated'!r}), then pass that file as ckpt= (ckpt_path= to resume training)"
    )


def test_resuming_from_a_sharded_fsdp_checkpoint_is_refused_the_same_way(tmp_path):
    # One check where every checkpoint path is resolved (tinylm.layout), so train.py's resume says it too.
    from tinylm.training.checkpoints import resume_checkpoint

    sharded = fake_sharded_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    with pytest.raises(CheckpointError) as error:
        resume_checkpoint(tmp_path / "run", tmp_path / "new")
    assert str(error.value).startswith(f"checkpoint {str(sharded)!r} is a sharded FSDP checkpoint")
    assert str(error.value).endswith("(ckpt_path= to resume training)")


def test_a_directory_without_shards_or_checkpoints_is_still_no_run(tmp_path):
    (tmp_path / "run" / "checkpoints" / "last.ckpt").mkdir(parents=True)  # a directory, but no meta.pt
    with pytest.raises(CheckpointError, match=r"no checkpoints/last\.ckpt in run directory"):
        load_model(tmp_path / "run")
