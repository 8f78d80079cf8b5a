"""The one record of a run: every metrics row goes to ``metrics.jsonl``, the configured backends (TensorBoard,
Weights & Biases) and the Ray dashboard's gauges; the iteration line and the final table are printed from the same
rows.

Backends (``log.backends``): ``tensorboard`` (``<run_dir>/tb``, one scalar per numeric field at step
``iteration``, flushed at once so a killed run keeps its last row) and ``wandb`` (optional: install ``wandb``;
``log.wandb_mode=offline``, the default, writes under ``<run_dir>/wandb`` without a network, ``wandb sync`` uploads
later). A resume rewrites what it can: ``metrics.jsonl`` and ``tb/`` are written anew from the rows kept (TensorBoard
cannot drop events), W&B continues its run.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cluster.metrics import RunMetrics
from common.progress import small_text
from launch.evaluation.intervals import paired_gain
from launch.evaluation.metrics import EVAL_PREFIXES, columns, eval_metrics, gauge_descriptions

BACKENDS = ("tensorboard", "wandb")


class RunLog:
    """Rows of one run (``history``) and where they go; ``cfg`` is the run config's ``log`` section."""

    def __init__(
        self, run_dir: Path, cfg: Any, *, algo: str, env: str, config: dict[str, Any] | None = None
    ) -> None:
        self.run_dir, self.cfg = run_dir, cfg
        self.path = run_dir / "metrics.jsonl"
        self.history: list[dict[str, Any]] = []
        self.gauges = RunMetrics(run=run_dir.name, algo=algo, env=env, descriptions=gauge_descriptions())
        self._tb: Any = None
        self._wandb: Any = None
        if "wandb" in cfg.backends:
            import wandb

            self._wandb = wandb.init(
                project=cfg.wandb_project,
                name=run_dir.name,
                dir=str(run_dir),
                mode=cfg.wandb_mode,
                config=config or {},
                resume="allow",
                id=run_dir.name,
            )

    def log(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        self._backends(record)
        self.gauges.record(record)

    def _backends(self, record: dict[str, Any]) -> None:
        step = int(record.get("iteration", 0))
        scalars = {
            k: v
            for k, v in record.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "iteration"
        }
        if "tensorboard" in self.cfg.backends:
            if self._tb is None:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.run_dir / "tb"))
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(
                {f"{record.get('phase', 'rl')}/{k}": v for k, v in scalars.items()}, step=max(step, 0)
            )

    def restart(self, history: Sequence[dict[str, Any]]) -> None:
        """Make ``metrics.jsonl`` and TensorBoard hold exactly ``history`` (a resume drops the rows after its
        checkpoint)."""
        self.history = list(history)
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.history))
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        shutil.rmtree(self.run_dir / "tb", ignore_errors=True)
        for record in self.history:
            if "tensorboard" in self.cfg.backends:
                self._backends({**record})

    def resume_at(self, iteration: int, last: dict[str, Any] | None) -> None:
        """Cut the logs back to a checkpoint of ``iteration``: rows of later (killed) iterations are dropped and the
        resumed run logs them again, once; ``last``, the checkpoint's own row, is restored if the run died between
        the checkpoint and its row."""
        history = [r for r in self.read() if int(r.get("iteration", 0)) <= iteration]
        if last is not None and not any(r.get("iteration") == last["iteration"] for r in history):
            history.append(last)
        self.restart(history)

    def read(self) -> list[dict[str, Any]]:
        """The rows ``metrics.jsonl`` holds (a run being resumed)."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


# -- what is printed -------------------------------------------------------------------------------------------


def eval_fields(ev: dict[str, Any], prefix: str = "eval_") -> dict[str, Any]:
    """An eval result as metric keys: every evaluation metric of the schema (``launch.evaluation.metrics``) the
    result holds, under ``prefix`` (eval_success with its Wilson 95 % interval over eval_n tasks × eval_samples
    episodes, eval_random, eval_base, the panel's label and per-task outcomes that paired comparisons of two runs
    read, each task's success rate over its samples that the RL gain reads, the tasks' ids that ``hierarl view``'s
    eval grid names, ...), then each role's valid-format rate and the success per task type. ``prefix``:
    ``train_eval_`` for the evaluation of the RL tasks (``env.train_tasks``)."""
    out: dict[str, Any] = {m.row_key(prefix): ev[m.key] for m in eval_metrics() if m.key in ev}
    out.update({f"{prefix}valid_format_{role}": v for role, v in ev.get("valid_roles", {}).items()})
    out.update({f"{prefix}{k}": v for k, v in ev.get("per_type", {}).items()})
    if "greedy" in ev:  # eval_greedy: the same panel played once a task at temperature 0
        out.update(eval_fields(ev["greedy"], prefix=f"{prefix}greedy_"))
    return out


def eval_text(ev: dict[str, Any]) -> str:
    dropped = f" ({ev['dropped']} dropped, counted lost)" if ev.get("dropped") else ""
    per_type = ev.get("per_type", {})
    types = ", ".join(f"{k} {v:.2f}" for k, v in per_type.items()) if len(per_type) > 1 else ""
    k = ev.get("samples", 1)
    samples = f" × {k} samples" if k > 1 else ""
    base = "" if math.isnan(ev["base"]) else f" · base model {ev['base']:.3f}"  # nan: eval_base_model=false
    greedy = ev.get("greedy")
    return (
        f"success {ev['success']:.3f} [{ev['ci_low']:.3f}, {ev['ci_high']:.3f}] (Wilson 95 %) on {ev['n']} tasks"
        f"{samples} of panel {ev['panel']}{dropped} · random policy {ev['random']:.3f}{base} · "
        f"valid format {ev['valid_format']:.2f}"
        + (f" · per type: {types}" if types else "")
        + (
            f" · greedy {greedy['success']:.3f} [{greedy['ci_low']:.3f}, {greedy['ci_high']:.3f}]"
            if greedy
            else ""
        )
    )


def logged_eval_text(row: dict[str, Any]) -> str:
    """``eval_text`` of the evaluations a metrics row holds (``eval_fields``' keys; the RL tasks' on a second line)."""
    lines = []
    for prefix in EVAL_PREFIXES:
        ev = {k.removeprefix(prefix): v for k, v in row.items() if k.startswith(prefix)}
        if "success" in ev:
            ev.setdefault("base", math.nan)
            if "greedy_success" in ev:
                ev["greedy"] = {k: ev[f"greedy_{k}"] for k in ("success", "ci_low", "ci_high")}
            lines.append(eval_text(ev))
    return "\n[hierarl]   on the tasks RL trains on: ".join(lines)


def iteration_line(r: dict[str, Any]) -> str:
    parts = [
        f"iter {r['iteration']:>3}",
        f"success {r['success']:.2f}",
        f"return {r['return']:+.2f}",
        f"valid {r['valid_format']:.2f}",
        f"kl {small_text(r.get('kl', 0.0), 4)}",
        f"update kl {small_text(r.get('kl_update', 0.0), 4)}",
        f"entropy {r.get('entropy', 0.0):.2f}",
        f"switch {r['switch_rate']:.2f}",
        f"seglen {r['segment_len']:.1f}",
        f"tok {r['prompt_tokens']:.0f}+{r['response_tokens']:.0f}",
        f"gap {r.get('logprob_gap', 0.0):.3f}",
    ]
    if "switch_agreement" in r:
        parts.append(f"expert-switch agreement {r['switch_agreement']:.2f}")
    if r.get("policy_lag"):
        parts.append(f"lag {r['policy_lag']}")
    if "eval_success" in r:
        parts.append(eval_short(r))
    parts.append(
        "time "
        + " ".join(
            f"{k[5:]}={v:.1f}s" for k, v in r.items() if k.startswith("time_") and k != "time_iteration"
        )
    )
    return " | ".join(parts)


def eval_short(r: dict[str, Any]) -> str:
    """``EVAL 0.33 [0.18,0.53] (random 0.02, base 0.00)``: a metrics row's eval with its Wilson 95 % interval."""
    nan = float("nan")
    base = r.get("eval_base", nan)
    return (
        f"EVAL {r['eval_success']:.2f} [{r.get('eval_ci_low', nan):.2f},{r.get('eval_ci_high', nan):.2f}] "
        f"(random {r.get('eval_random', nan):.2f}" + ("" if math.isnan(base) else f", base {base:.2f}") + ")"
    )


def _cell(value: Any, spec: str, width: int) -> str:
    """``value`` formatted right-aligned in ``width``; ``-`` where the row has none (no eval on a train row, the
    base model off): a missing figure reads as missing, not as ``nan``."""
    if not _present(value):
        return f"{'-':>{width}}"
    return f"{format(value, spec):>{width}}"


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


INTERVAL = ("[95% Wilson]", 14)
"""The header and width of the column beside a metric printed with its interval (``Metric.interval``)."""


def _interval(row: dict[str, Any]) -> str:
    """The held-out panel's Wilson 95 % interval of a row ("" where the row has no evaluation)."""
    return f"[{row['eval_ci_low']:.3f}, {row['eval_ci_high']:.3f}]" if "eval_ci_low" in row else ""


def _table_columns(history: Sequence[dict[str, Any]]) -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    """(header, cell of a row) of each final-table column, its separator included: the schema's columns, a column
    left out where it is optional and no row has a value."""
    out: list[tuple[str, Callable[[dict[str, Any]], str]]] = []
    for m in columns():
        if m.optional and not any(_present(r.get(m.row_key())) for r in history):
            continue
        width = m.width or len(m.column)
        out.append(
            (f"{m.column:<{width}}  ", lambda r, m=m, w=width: f"{_cell(r.get(m.row_key()), m.fmt, w)}  ")
        )
        if m.interval:
            head, w = INTERVAL
            out.append((f"{head:<{w}} ", lambda r, w=w: f"{_interval(r):<{w}} "))
    return out


def final_table(history: Sequence[dict[str, Any]]) -> str:
    """The run's rows in the schema's columns (``launch.evaluation.metrics``): train success, eval success with its
    Wilson 95 % interval beside the random policy and (where it played, ``eval_base_model``) the zero-shot base
    model on the same panel pairs, eval format validity, return, iteration time."""
    table = _table_columns(history)
    rows = ["", ("phase      iter  " + "".join(head for head, _ in table)).rstrip()]
    for r in history:
        cells = "".join(cell(r) for _, cell in table)
        rows.append(f"{r.get('phase', ''):<10} {r.get('iteration', ''):>4}  {cells}".rstrip())
    base = any(_present(r.get("eval_base")) for r in history)
    panels = sorted({f"{r['eval_panel']} ({r['eval_n']} tasks)" for r in history if "eval_n" in r})
    if panels:
        who = (
            "random / base: the random policy / the zero-shot base model"
            if base
            else "random: the random policy"
        )
        rows.append(f"eval panel: {', '.join(panels)}; {who}")
    rows += gain_lines(history)
    return "\n".join(rows)


GAIN_PANELS = (
    ("train_eval_", "on the {n} tasks RL trains on"),
    ("eval_", "on {n} held-out tasks"),
    ("train_eval_greedy_", "on the {n} tasks RL trains on"),
    ("eval_greedy_", "on {n} held-out tasks"),
)
"""The panels an RL gain is reported on (metric prefix, what its tasks are), the RL tasks first: where a run trains
on a fixed task set (``env.train_tasks``), that is where its learning shows; the held-out panel says whether it
carries over."""


def gain_lines(history: Sequence[dict[str, Any]]) -> list[str]:
    """``RL gain over BC ...: +x.xx [lo, hi] (paired over N tasks × k samples, t over tasks)`` per panel: the last
    evaluation's per-task success rates against the one after BC (``launch.evaluation.intervals.paired_gain``); none before RL has
    been evaluated."""
    start = next((r for r in history if r.get("phase") == "bc"), None)
    end = next((r for r in reversed(history) if r.get("phase") == "rl" and "eval_task_rates" in r), None)
    if start is None or end is None:
        return []
    out = []
    for prefix, where in GAIN_PANELS:
        before, after = start.get(f"{prefix}task_rates"), end.get(f"{prefix}task_rates")
        if before is None or after is None or len(before) != len(after):
            continue
        gain = paired_gain(before, after)
        temp = end.get(f"{prefix}temperature")
        at = f" at T = {temp:g}" if temp is not None else ""
        out.append(
            f"RL gain over BC {where.format(n=len(before))}{at}: {gain.text(int(end.get(f'{prefix}samples', 1)))}"
        )
    return out
