"""The BC row's fields: the NLL of every epoch, and each adapter's where the policy has several (Multi2), kept
when another run starts from that BC (``bc.from_run``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from launch.driver.update_plan import UpdatePlan, UpdateResult
from launch.driver.warm_start import bc_from_run, behaviour_cloning


class _Updater:
    """Stands in for the learner side: each epoch's metrics as ``Updater.update`` returns them for two adapters
    (the row-weighted mean under the plain name), and the algorithm BC's updater was made for."""

    def __init__(self) -> None:
        self.calls: list[UpdatePlan] = []
        self.algo = None

    def with_algorithm(self, algo, algo_cfg):
        self.algo = (algo.name, algo_cfg.agg)
        return self

    def update(self, trajs, plan):
        epoch = len(self.calls)
        self.calls.append(plan)
        # planner 2 rows, executor 6 rows: mean = (2 * p + 6 * e) / 8
        p, e = 0.8 - 0.2 * epoch, 0.4 - 0.2 * epoch
        metrics = {"nll": (2 * p + 6 * e) / 8, "planner/nll": p, "executor/nll": e, "optimizer_steps": 2.0}
        return UpdateResult(metrics, {})


def test_each_adapters_nll_is_kept_per_epoch_and_carried_by_bc_from_run(tmp_path, capsys):
    bc_cfg = SimpleNamespace(epochs=2, lr=1e-4, mini_batch_size=4, agg="token-mean")
    updater = _Updater()
    row = behaviour_cloning(updater, [], bc_cfg, seed=5)
    # epoch 0: (2 * 0.8 + 6 * 0.4) / 8 = 0.5; epoch 1: (2 * 0.6 + 6 * 0.2) / 8 = 0.3
    assert row["nll_epoch0"] == 0.5 and abs(row["nll_epoch1"] - 0.3) < 1e-12
    assert row["planner/nll_epoch0"] == 0.8 and abs(row["planner/nll_epoch1"] - 0.6) < 1e-12
    assert row["executor/nll_epoch0"] == 0.4 and abs(row["executor/nll_epoch1"] - 0.2) < 1e-12
    assert "optimizer_steps" not in row and not any(k.startswith("optimizer") for k in row)
    assert updater.algo == ("sft", "token-mean")
    assert [c.seed for c in updater.calls] == [5, 6] and updater.calls[0].measure is False
    assert [c.epochs for c in updater.calls] == [1, 1]  # one pass per BC epoch, not learner.ppo_epochs
    assert [(c.lr, c.mini_batch_size) for c in updater.calls] == [(1e-4, 4)] * 2
    assert "nll 0.500 (executor 0.400, planner 0.800)" in capsys.readouterr().out

    ckpt = tmp_path / "run" / "checkpoints" / "bc"
    ckpt.mkdir(parents=True)
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"phase": "bc", **row, "other": 1}) + "\n")
    loaded = []
    learner = SimpleNamespace(load_checkpoint=lambda path, only: loaded.append((path, only)))
    kept = bc_from_run(learner, ckpt, ["planner", "executor"])
    assert loaded == [(str(ckpt), ["planner", "executor"])]
    assert kept["planner/nll_epoch1"] == row["planner/nll_epoch1"] and kept["nll_epoch0"] == 0.5
    assert "other" not in kept and kept["demos"] == 0
    evaluated = {"eval_success": 0.25, "eval_task_rates": [0.5, 0.0], "train_eval_success": 0.5}
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"phase": "bc", **row, **evaluated}) + "\n")
    assert not any(k.startswith(("eval_", "train_eval_")) for k in bc_from_run(learner, ckpt, ["policy"]))
    assert bc_from_run(learner, ckpt, ["policy"], with_eval=True).items() >= evaluated.items()
