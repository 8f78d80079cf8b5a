"""``hierarl train``'s check that needs more than the config, run before Ray starts: the expert demonstrations the run
will clone must fit ``rollout.max_new_tokens``. They are played here and again by the run (a fraction of a second on
TextCraft and the synthetic env; ALFWorld loads its games once more), rather than found too long after Ray, the
engines and the learner have started."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from launch.config import TrainConfig


def clones_demonstrations(cfg: TrainConfig) -> bool:
    """Whether the run will play the env expert's demonstrations: its own BC (not another run's, ``bc.from_run``) or
    an offline algorithm's data. A resume of a run past its warm start plays none."""
    from learners.algos.registry import get_algo

    resumed = cfg.resume and (Path(cfg.run_dir).expanduser() / "checkpoints").is_dir()
    own_bc = cfg.bc.enabled and not cfg.bc.from_run
    return not resumed and (own_bc or get_algo(cfg.algo).offline)


def check_demonstrations(cfg: TrainConfig) -> None:
    """The run's demonstrations (the same tasks, seed and agent format as its BC will draw) played with the expert and
    checked by ``actors.demos.check_demos_fit``: a ValueError in one line naming the length they need. No
    demonstration at all is left to the run, which stops on it with its own line."""
    if not clones_demonstrations(cfg):
        return
    from transformers import AutoTokenizer

    from actors.demos import check_demos_fit
    from actors.models import resolve_model_path
    from launch.driver.wiring import expert_demonstrations
    from launch.evaluation.tasks import task_split

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(cfg.model.path, cfg.model.cache_dir))
    panel, rl_ids, bc_ids = task_split(cfg)
    with contextlib.redirect_stdout(io.StringIO()):  # the run prints its own count of the demonstrations
        demos = expert_demonstrations(cfg, tokenizer, bc_ids, rl_ids if panel is not None else ())
    if demos:
        check_demos_fit(demos, cfg.rollout.max_new_tokens, tokenizer)
