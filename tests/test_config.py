"""ModelConfig: dict/JSON round trips and validation messages that say what is wrong and what is allowed."""

import json
from typing import get_args

import pytest
import torch.nn.functional as F

from tinylm.model import FFNS, MLP, NORMS, PLACEMENTS, LayerNorm, ModelConfig, NormPlacement
from tinylm.model.config import Init

# The registries are the lists of choices; ModelConfig must accept exactly these.
CHOICES = {
    "norm": list(PLACEMENTS),
    "norm_type": list(NORMS),
    "act": list(FFNS),
    "init": list(get_args(Init)),
}
SIZE_FIELDS = ["vocab_size", "block_size", "n_layer", "n_head", "d_model", "d_ff"]


def _non_default_config():
    # Every field away from its default, so a field dropped by to_dict/from_dict would be noticed.
    return ModelConfig(
        vocab_size=11,
        block_size=9,
        n_layer=3,
        n_head=2,
        d_model=24,
        norm="sandwich",
        norm_type="rms",
        act="swiglu",
        d_ff=40,
        qk_norm=True,
        bias=False,
        dropout=0.25,
        tie_weights=False,
        init="xavier",
        norm_eps=1e-6,
        fused_norms=False,
    )


def test_non_default_config_differs_from_default_in_every_field():
    # Guards the round-trip tests below: they are only as strong as this config is unusual.
    default = ModelConfig().to_dict()
    custom = _non_default_config().to_dict()
    assert set(default) == set(custom)
    assert all(default[name] != custom[name] for name in default)


@pytest.mark.parametrize("config", [ModelConfig(), _non_default_config()], ids=["default", "custom"])
def test_dict_round_trip(config):
    restored = ModelConfig.from_dict(config.to_dict())
    assert restored == config
    assert restored.to_dict() == config.to_dict()


@pytest.mark.parametrize("config", [ModelConfig(), _non_default_config()], ids=["default", "custom"])
def test_json_round_trip(config):
    # A checkpoint stores the config as JSON, so every value must survive json.dumps/loads unchanged.
    restored = ModelConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert restored == config


def test_default_d_ff_is_filled_in_and_survives_round_trip():
    config = ModelConfig(d_model=96, n_head=4, act="geglu")
    assert config.d_ff == 256
    assert config.to_dict()["d_ff"] == 256
    assert ModelConfig.from_dict(config.to_dict()).d_ff == 256


@pytest.mark.parametrize("field", sorted(CHOICES))
def test_unknown_choice_names_field_and_lists_choices(field):
    with pytest.raises(ValueError) as excinfo:
        ModelConfig(**{field: "bogus"})
    message = str(excinfo.value)
    # Named as on the command line, `model.<field>`.
    assert message.startswith(f"model.{field}='bogus' is not one of ")
    for allowed in CHOICES[field]:
        assert repr(allowed) in message


@pytest.mark.parametrize("field", sorted(CHOICES))
def test_every_listed_choice_is_accepted(field):
    # The other half of the choice check: nothing in the allowed lists is rejected.
    for value in CHOICES[field]:
        assert getattr(ModelConfig(**{field: value}), field) == value


@pytest.mark.parametrize(
    ("registry", "field", "entry"),
    [
        (PLACEMENTS, "norm", NormPlacement(before_branch=True, after_add=True)),
        (NORMS, "norm_type", LayerNorm),
        (FFNS, "act", (MLP, F.silu)),
    ],
    ids=["PLACEMENTS", "NORMS", "FFNS"],
)
def test_a_new_registry_entry_is_a_choice_at_once(monkeypatch, registry, field, entry):
    # No second list to update: the checks read the registry itself.
    monkeypatch.setitem(registry, "new", entry)
    assert getattr(ModelConfig(**{field: "new"}), field) == "new"
    monkeypatch.delitem(registry, "new")
    with pytest.raises(ValueError, match=f"model.{field}='new' is not one of"):
        ModelConfig(**{field: "new"})


@pytest.mark.parametrize("value", [0, -1])
@pytest.mark.parametrize("field", SIZE_FIELDS)
def test_non_positive_sizes_raise(field, value):
    with pytest.raises(ValueError, match=rf"^model\.{field}={value} must be a positive whole number$"):
        ModelConfig(**{field: value})


@pytest.mark.parametrize("field", SIZE_FIELDS)
def test_bool_is_not_a_size(field):
    # True is an int in Python; a config saying n_layer=True is a mistake, not one layer.
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        ModelConfig(**{field: True})


def test_d_model_not_divisible_by_n_head():
    with pytest.raises(ValueError) as excinfo:
        ModelConfig(d_model=30, n_head=4)
    assert str(excinfo.value) == (
        "model.d_model=30 must be divisible by n_head=4 (choose d_model a multiple of n_head)"
    )


@pytest.mark.parametrize(("field", "value"), [("dropout", -0.1), ("dropout", 1.0), ("norm_eps", 0.0)])
def test_out_of_range_floats_raise(field, value):
    with pytest.raises(ValueError, match=rf"^model\.{field}={value} must be a number"):
        ModelConfig(**{field: value})


def test_from_dict_rejects_unknown_field():
    values = ModelConfig().to_dict() | {"n_embd": 64}
    with pytest.raises(ValueError, match="n_embd"):
        ModelConfig.from_dict(values)


def test_from_dict_validates_values():
    # from_dict must go through the same checks as the constructor, not bypass them.
    values = ModelConfig().to_dict() | {"norm": "middle"}
    with pytest.raises(ValueError, match="norm"):
        ModelConfig.from_dict(values)


def test_head_size():
    assert ModelConfig(d_model=48, n_head=6).head_size == 8
