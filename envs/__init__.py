"""Text environments behind one interface: ``envs.make(name, **options)`` (see ``envs.base``)."""

from envs.base import INFO_KEYS, TextEnv, env_names, make, register_env, success_reward

__all__ = ["INFO_KEYS", "TextEnv", "env_names", "make", "register_env", "success_reward"]
