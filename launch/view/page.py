"""The ``hierarl view`` report: one self-contained HTML file (plotly.js inline, the data as JSON, a small script that
renders the episodes), built from ``launch.view.run_data`` records. Opens offline; nothing is fetched."""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict
from importlib import resources
from typing import Any

from launch.evaluation.metrics import in_figure
from launch.view.run_data import EpisodeView, PanelGrid, RunView, compare_grids, keys_with, series

PHASES = ("rollout", "logprobs", "values", "advantage", "update", "measure", "push", "eval", "checkpoint")
"""The phase times (``time_<phase>``) stacked per iteration, in loop order."""
DASH = ("solid", "dash")
"""Run A's lines solid, run B's dashed."""


def _figure(
    traces: list[dict[str, Any]], title: str, ytitle: str, *, log: bool = False, **layout: Any
) -> dict:
    return {
        "data": traces,
        "layout": {
            "title": {"text": title, "x": 0.02, "xanchor": "left"},
            "xaxis": {"title": {"text": "iteration (0: after BC)"}, "dtick": 1},
            "yaxis": {"title": {"text": ytitle}, **({"type": "log"} if log else {})},
            "height": 340,
            "margin": {"t": 40, "r": 10, "b": 40, "l": 60},
            "legend": {"font": {"size": 10}},
            **layout,
        },
    }


def _line(run: RunView, key: str, name: str, dash: str, **extra: Any) -> dict[str, Any] | None:
    xs, ys = series(run.history, key)
    if not xs:
        return None
    return {"x": xs, "y": ys, "name": name, "mode": "lines+markers", "line": {"dash": dash}, **extra}


def success_figure(runs: list[RunView]) -> dict:
    """The metric schema's ``success`` figure (``launch.evaluation.metrics``): the training rows' metrics as lines,
    an evaluation metric with its interval on each panel with error bars, the others (the random policy) dotted on
    the held-out panel."""
    traces = []
    for run, dash in zip(runs, DASH, strict=False):
        for m in in_figure("success"):
            if not m.evaluation:
                traces.append(_line(run, m.key, f"{run.name} train", dash))
            elif m.interval:
                traces += [_interval_trace(run, prefix, label, dash) for prefix, label in PANELS]
            else:
                traces.append(_line(run, m.row_key(), f"{run.name} {m.label} (held-out)", "dot"))
    return _figure([t for t in traces if t], "Success (eval: Wilson 95 % interval)", "success rate")


PANELS = (("eval_", "eval held-out"), ("train_eval_", "eval RL tasks"))
"""The evaluations a run logs (metric prefix, legend): the held-out panel's and the RL tasks'."""


def _interval_trace(run: RunView, prefix: str, label: str, dash: str) -> dict[str, Any] | None:
    """A panel's eval success per iteration with its Wilson interval as error bars (None: never evaluated)."""
    rows = [r for r in run.history if f"{prefix}success" in r and "iteration" in r]
    if not rows:
        return None
    ys = [r[f"{prefix}success"] for r in rows]
    err = {
        "type": "data",
        "symmetric": False,
        "array": [r.get(f"{prefix}ci_high", y) - y for r, y in zip(rows, ys, strict=True)],
        "arrayminus": [y - r.get(f"{prefix}ci_low", y) for r, y in zip(rows, ys, strict=True)],
    }
    x = [r["iteration"] for r in rows]
    return {"x": x, "y": ys, "name": f"{run.name} {label}", "mode": "lines+markers", "error_y": err} | {
        "line": {"dash": dash}
    }


def group_figure(runs: list[RunView], prefix: str, title: str, *, log: bool = False) -> dict | None:
    traces = [
        _line(run, key, f"{run.name} {key.removeprefix(prefix)}", dash)
        for run, dash in zip(runs, DASH, strict=False)
        for key in keys_with(run.history, prefix)
    ]
    traces = [t for t in traces if t]
    return _figure(traces, title, prefix.rstrip("/_"), log=log) if traces else None


def policy_figure(runs: list[RunView]) -> dict | None:
    """The metric schema's ``policy`` figure: each metric as a line (an evaluation's: the held-out panel's)."""
    traces = [
        _line(run, m.row_key(), f"{run.name} {m.row_key()}", dash)
        for run, dash in zip(runs, DASH, strict=False)
        for m in in_figure("policy")
    ]
    traces = [t for t in traces if t]
    title = "Switches (rate, agreement with the expert's), valid format, entropy, segment length"
    return _figure(traces, title, "value") if traces else None


def phase_figure(run: RunView) -> dict | None:
    traces = []
    for phase in PHASES:
        xs, ys = series([r for r in run.history if r.get("phase") == "rl"], f"time_{phase}")
        if xs:
            traces.append({"x": xs, "y": ys, "name": phase, "type": "bar"})
    if not traces:
        return None
    return _figure(traces, f"{run.name}: phase times per iteration", "seconds", barmode="stack")


def figures(runs: list[RunView]) -> list[dict]:
    out = [
        success_figure(runs),
        group_figure(runs, "kl_update/", "Update KL per token group", log=True),
        group_figure(runs, "adv_rms/", "Advantage rms per token group"),
        policy_figure(runs),
        *(phase_figure(r) for r in runs),
    ]
    return [f for f in out if f]


def episode_json(ep: EpisodeView) -> dict[str, Any]:
    d = asdict(ep)
    d["return"] = ep.episode_return
    return d


def grid_html(grid: PanelGrid) -> str:
    counts = {
        c: sum(grid.change(i) == c for i in range(len(grid.task_ids))) for c in ("gained", "lost", "same")
    }
    rows = "".join(
        f'<tr class="{grid.change(i)}"><td>{html.escape(t)}</td><td>{grid.before[i]:.2f}</td>'
        f"<td>{grid.after[i]:.2f}</td><td>{grid.change(i)}</td></tr>"
        for i, t in enumerate(grid.task_ids)
    )
    head = (
        f"<h3>{html.escape(grid.label)}</h3><p>panel {html.escape(grid.panel)}, {grid.samples} sample(s) a task: "
        f"{counts['gained']} gained, {counts['lost']} lost, {counts['same']} same</p>"
    )
    return (
        f'{head}<table class="grid"><tr><th>task</th><th>before</th><th>after</th><th>change</th></tr>'
        f"{rows}</table>"
    )


def clean(x: Any) -> Any:
    """``x`` with every non-finite float as None: the page's JSON must parse in a browser (no NaN tokens)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    return x


def _asset(name: str) -> str:
    return (resources.files("launch.view") / "static" / name).read_text()


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def build_page(runs: list[RunView]) -> str:
    """The report of one run, or two overlaid (the first's episodes and grids; both runs' curves)."""
    main = runs[0]
    title = " vs ".join(r.name for r in runs)
    notes = "".join(f"<li>{html.escape(f'{r.name}: {n}')}</li>" for r in runs for n in r.notes)
    figs_data = figures(runs)
    figs = "".join(f'<div class="fig" id="fig{i}"></div>' for i in range(len(figs_data)))
    data = clean({"figures": figs_data, "episodes": [episode_json(e) for e in main.episodes]})
    grids = "".join(grid_html(g) for g in main.grids) or "<p>No before/after evaluation in this run.</p>"
    if len(runs) == 2:
        pairs = compare_grids(*runs)
        grids += "".join(grid_html(g) for g in pairs) or "<p>The two runs share no evaluation panel.</p>"
    payload = json.dumps(data, allow_nan=False).replace("</", "<\\/")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hierarl view: {html.escape(title)}</title>
<style>{_asset("view.css")}</style>
<script>{_plotly_js()}</script></head>
<body>
<h1>hierarl view: {html.escape(title)}</h1>
{f'<ul class="notes">{notes}</ul>' if notes else ""}
<nav><a href="#learning">Learning</a> · <a href="#episodes">Episodes</a> · <a href="#grid">Eval grid</a></nav>
<section id="learning"><h2>Learning</h2>{figs}</section>
<section id="episodes"><h2>Episodes of {html.escape(main.name)}</h2>
<div class="filters">episodes <select id="f-source"></select> iteration <select id="f-iter"></select> task <select id="f-task"></select>
outcome <select id="f-won"><option value="">all</option><option value="1">won</option>
<option value="0">lost</option></select> colour tokens by <select id="f-colour">
<option value="block">block</option><option value="adv">advantage</option></select></div>
<div class="browser"><ol id="episode-list"></ol><div id="episode"></div></div>
<p class="legend">blocks: <span class="k-switch">switch</span> <span class="k-subgoal">subgoal</span>
<span class="g-subgoal_keep">subgoal copied on a KEEP turn</span> <span class="k-action">action</span>
<span class="k-think">think</span> <span class="k-other">other</span> · advantage: <span
style="background: rgb(64, 64, 255); color: #fff">+<span id="adv-scale"></span></span> … 0 …
<span style="background: rgb(255, 64, 64); color: #fff">−</span> (hover a token for its value) · the band left of a
turn marks its subgoal segment</p></section>
<section id="grid"><h2>Eval grid: before and after RL, task by task</h2>{grids}</section>
<script type="application/json" id="data">{payload}</script>
<script>{_asset("view.js")}</script>
</body></html>
"""
