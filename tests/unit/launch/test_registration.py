"""The run-time registration hooks beside the three name tables: ``learners.algos.registry.register_algo``,
``envs.register_env`` and ``actors.protocols.register_agent`` (the docs' worked examples register through them)."""

from __future__ import annotations

import dataclasses

import pytest

import envs
import envs.base
from actors.agents import react
from actors.protocols import AGENTS, make_agent, register_agent
from envs.synthetic import SyntheticHierEnv
from launch.config import resolve_config, validate
from learners.algos import rloo
from learners.algos.registry import ALGOS, get_algo, register_algo


@pytest.fixture(autouse=True)
def restored():
    tables = [ALGOS, envs.base._REGISTRY, AGENTS]
    saved = [dict(t) for t in tables]
    yield
    for table, before in zip(tables, saved, strict=True):
        table.clear()
        table.update(before)


def test_register_algo():
    record = dataclasses.replace(rloo.ALGORITHM, name="rloo_again")
    assert register_algo(record) is record and get_algo("rloo_again") is record
    cfg = resolve_config("ppo_synthetic_small", ["algo=rloo_again", "algo.kl_coef=0.02"])
    assert validate(cfg).kl_coef == 0.02  # validation and the algo.* keys see it
    with pytest.raises(ValueError, match="algorithm 'rloo' is already registered"):
        register_algo(rloo.ALGORITHM)
    with pytest.raises(TypeError, match="takes an Algorithm record"):
        register_algo(rloo)  # the module, not its ALGORITHM


def test_register_env():
    envs.register_env("synthetic_again", "envs.synthetic:SyntheticHierEnv")
    assert "synthetic_again" in envs.env_names()
    assert isinstance(envs.make("synthetic_again", stages=2), SyntheticHierEnv)
    with pytest.raises(ValueError, match="environment 'synthetic' is already registered"):
        envs.register_env("synthetic", "envs.synthetic:SyntheticHierEnv")
    for bad in ("envs.synthetic.SyntheticHierEnv", ":SyntheticHierEnv", "envs.synthetic:"):
        with pytest.raises(ValueError, match="target must be 'module:factory'"):
            envs.register_env("other", bad)
    envs.register_env("missing", "no_such_module_4711:Env", "hierarl[missing]")
    with pytest.raises(ImportError, match=r"needs `pip install 'hierarl\[missing\]'`"):
        envs.make("missing")


def test_register_agent():
    spec = dataclasses.replace(react.SPEC, name="react_again")
    assert register_agent(spec) is spec and AGENTS["react_again"] is spec
    assert isinstance(make_agent("react_again", env_name="synthetic"), react.ReactAgent)
    with pytest.raises(ValueError, match="agent protocol 'react' is already registered"):
        register_agent(react.SPEC)
    with pytest.raises(TypeError, match="takes an AgentSpec"):
        register_agent(react)
    with pytest.raises(ValueError, match=r"unknown agent protocol 'nope'; known: .*react_again"):
        make_agent("nope", env_name="synthetic")


def test_the_tables_are_restored():
    assert "rloo_again" not in ALGOS and "react_again" not in AGENTS
    assert "synthetic_again" not in envs.env_names()
