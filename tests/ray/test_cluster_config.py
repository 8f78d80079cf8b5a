"""``ray_cluster.yaml`` against Ray's own cluster-launcher schema, offline (no cloud account, no cluster)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _validate(cfg: dict) -> None:
    from ray.autoscaler._private.util import fillout_defaults, validate_config

    validate_config(fillout_defaults(copy.deepcopy(cfg)))  # what `ray up` checks before it starts anything


def test_ray_cluster_yaml_passes_rays_validator():
    cfg = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    _validate(cfg)
    starts = cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"]
    assert all("ALFWORLD_DATA=" in c and "ulimit -n 65536" in c for c in starts if c.startswith("ulimit"))
    assert sum(c.startswith("ulimit") for c in starts) == 2


def test_the_validator_catches_a_misspelled_key():
    cfg = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    cfg["head_node_typ"] = cfg.pop("head_node_type")
    with pytest.raises(Exception, match="head_node_typ"):
        _validate(cfg)
