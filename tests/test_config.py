"""ModelConfig: dict/JSON round trips and validation messages that say what is wrong and what is allowed."""

import json

import pytest

from tinylm.model import ModelConfig

CHOICES = {
    "norm": ["pre", "post", "sandwich", "on_branch"],
    "norm_type": ["layer", "rms"],
    "act": ["relu", "gelu", "swiglu", "geglu"],
    "init": ["gpt2", "xavier"],
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
    assert field in message
    assert "bogus" in message
    for allowed in CHOICES[field]:
        assert repr(allowed) in message


@pytest.mark.parametrize("field", sorted(CHOICES))
def test_every_listed_choice_is_accepted(field):
    # The other half of the choice check: nothing in the allowed lists is rejected.
    for value in CHOICES[field]:
        assert getattr(ModelConfig(**{field: value}), field) == value


@pytest.mark.parametrize("value", [0, -1])
@pytest.mark.parametrize("field", SIZE_FIELDS)
def test_non_positive_sizes_raise(field, value):
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        ModelConfig(**{field: value})


@pytest.mark.parametrize("field", SIZE_FIELDS)
def test_bool_is_not_a_size(field):
    # True is an int in Python; a config saying n_layer=True is a mistake, not one layer.
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        ModelConfig(**{field: True})


def test_d_model_not_divisible_by_n_head():
    with pytest.raises(ValueError) as excinfo:
        ModelConfig(d_model=30, n_head=4)
    message = str(excinfo.value)
    assert "d_model" in message
    assert "n_head" in message


@pytest.mark.parametrize(("field", "value"), [("dropout", -0.1), ("dropout", 1.0), ("norm_eps", 0.0)])
def test_out_of_range_floats_raise(field, value):
    with pytest.raises(ValueError, match=field):
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
