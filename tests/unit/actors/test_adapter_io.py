"""PEFT adapter folders round-trip, including the bf16 ones a bf16 learner saves (numpy has no bfloat16)."""

import json

import numpy as np
import torch
from safetensors.torch import save_file

from actors.lora_weights import read_peft_adapter, write_peft_adapter
from common.lora import LoraSpec


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


def test_init_adapter_is_loaded_into_the_learner(tmp_path):
    from launch.driver.warm_start import load_init_adapter

    w = {"m.lora_A.weight": np.ones((2, 3), np.float32)}
    write_peft_adapter(tmp_path, w, LoraSpec(2, 4, ("v_proj", "q_proj")))
    learner = _RecordingLearner()
    load_init_adapter(
        learner, str(tmp_path), LoraSpec(2, 4, ("q_proj", "v_proj"))
    )  # target order does not matter
    np.testing.assert_array_equal(learner.loaded["m.lora_A.weight"], w["m.lora_A.weight"])


def test_init_adapter_of_another_rank_is_refused_before_loading(tmp_path):
    import pytest

    write_peft_adapter(
        tmp_path, {"m.lora_A.weight": np.ones((2, 3), np.float32)}, LoraSpec(2, 4, ("q_proj",))
    )
    from launch.driver.warm_start import load_init_adapter

    learner = _RecordingLearner()
    with pytest.raises(ValueError, match="rank/alpha/targets 2/4"):
        load_init_adapter(learner, str(tmp_path), LoraSpec(8, 16, ("q_proj",)))
    assert learner.loaded is None


def test_merge_lora_golden_and_fused_layers_take_untouched_parts_from_the_base():
    """W + scale·B·A per module; vLLM's stacked qkv_proj = [q; k; v] rows with k (not a LoRA target) from the base."""
    from actors.lora_weights import fused_linears, merge_lora

    pre = "model.layers.0.self_attn"
    base = {f"{pre}.{p}_proj.weight": np.full((2, 3), float(i), np.float32) for i, p in enumerate("qkvo")}
    a = np.array([[1.0, 0.0, 2.0]], np.float32)  # [r=1, in=3]
    b = np.array([[1.0], [-1.0]], np.float32)  # [out=2, r=1]
    weights = {
        f"base_model.model.{pre}.{p}_proj.lora_{x}.weight": m for p in "qv" for x, m in (("A", a), ("B", b))
    }
    merged = merge_lora(base, weights, scale=2.0)
    assert sorted(merged) == [f"{pre}.q_proj.weight", f"{pre}.v_proj.weight"]
    # q: 0 + 2·B·A = 2·[[1, 0, 2], [-1, 0, -2]];  v: 2 + the same
    np.testing.assert_array_equal(merged[f"{pre}.q_proj.weight"], [[2, 0, 4], [-2, 0, -4]])
    np.testing.assert_array_equal(merged[f"{pre}.v_proj.weight"], [[4, 2, 6], [0, 2, -2]])
    layers = fused_linears(merged, base)
    assert list(layers) == [f"{pre}.qkv_proj"]  # o_proj untouched: not replaced
    np.testing.assert_array_equal(
        layers[f"{pre}.qkv_proj"],
        np.concatenate(
            [merged[f"{pre}.q_proj.weight"], base[f"{pre}.k_proj.weight"], merged[f"{pre}.v_proj.weight"]]
        ),
    )
    o = {f"{pre}.o_proj.weight": np.ones((2, 3), np.float32)}
    assert list(fused_linears(o, base)) == [f"{pre}.o_proj"]
