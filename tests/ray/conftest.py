"""Local Ray on loopback for the tests in this folder (docs/platform.md gotchas: auth off, no eth0 traffic)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()
