"""PEFT adapter folders round-trip, including the bf16 ones a bf16 learner saves (numpy has no bfloat16)."""

import json

import numpy as np
import torch
from safetensors.torch import save_file

from actors.inference import LoraSpec, write_peft_adapter
from actors.rollout import read_peft_adapter


def test_bf16_adapter_reads_as_float32(tmp_path):
    a = torch.tensor([[0.5, -1.25]], dtype=torch.bfloat16)
    save_file({"x.lora_A.weight": a}, str(tmp_path / "adapter_model.safetensors"))
    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"r": 1, "lora_alpha": 2, "target_modules": ["q_proj"], "lora_dropout": 0.0})
    )
    weights, spec = read_peft_adapter(tmp_path)
    assert weights["x.lora_A.weight"].dtype == np.float32
    np.testing.assert_array_equal(weights["x.lora_A.weight"], [[0.5, -1.25]])
    assert spec == LoraSpec(1, 2, ("q_proj",), 0.0)


def test_written_adapter_round_trips(tmp_path):
    w = {"m.lora_A.weight": np.arange(6, dtype=np.float32).reshape(2, 3)}
    write_peft_adapter(tmp_path, w, LoraSpec(2, 4, ("v_proj",)))
    back, spec = read_peft_adapter(tmp_path)
    np.testing.assert_array_equal(back["m.lora_A.weight"], w["m.lora_A.weight"])
    assert spec.rank == 2 and spec.target_modules == ("v_proj",)


class _RecordingLearner:
    def __init__(self) -> None:
        self.loaded: dict[str, np.ndarray] | None = None

    def load_adapter_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.loaded = weights


def _trainer_with(lora: LoraSpec):
    """A Trainer shell holding only what ``load_init_adapter`` reads (no Ray, no model)."""
    from launch.train import Trainer

    trainer = Trainer.__new__(Trainer)
    trainer.lora, trainer.learner = lora, _RecordingLearner()
    return trainer


def test_init_adapter_is_loaded_into_the_learner(tmp_path):
    w = {"m.lora_A.weight": np.ones((2, 3), np.float32)}
    write_peft_adapter(tmp_path, w, LoraSpec(2, 4, ("v_proj", "q_proj")))
    trainer = _trainer_with(LoraSpec(2, 4, ("q_proj", "v_proj")))  # target order does not matter
    trainer.load_init_adapter(str(tmp_path))
    np.testing.assert_array_equal(trainer.learner.loaded["m.lora_A.weight"], w["m.lora_A.weight"])


def test_init_adapter_of_another_rank_is_refused_before_loading(tmp_path):
    import pytest

    write_peft_adapter(
        tmp_path, {"m.lora_A.weight": np.ones((2, 3), np.float32)}, LoraSpec(2, 4, ("q_proj",))
    )
    trainer = _trainer_with(LoraSpec(8, 16, ("q_proj",)))
    with pytest.raises(ValueError, match="rank/alpha/targets 2/4"):
        trainer.load_init_adapter(str(tmp_path))
    assert trainer.learner.loaded is None
