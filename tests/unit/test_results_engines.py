"""engines_alfworld: the engine table, the crossover and the run's figures, recomputed from the JSON kept beside
the page (as in test_results_figures)."""

from __future__ import annotations

import re

from tests.unit.results_pages import assert_shows, data, flat, numbers, page, row

LABELS = {"hf": "HF + peft", "hf_merged": "HF, merged", "vllm_merged": "vLLM-cpu, merged"}
"""The page's first cell per engine of engines.json."""


def test_engines_alfworld_table_and_crossover():
    """Per engine: start-up, tokens/s, its ratio to HF + peft, the seconds of one call of batch × new tokens and the
    resident memory; then the calls after which vLLM-cpu's longer start-up is repaid: (start-up difference) ÷
    (per-call saving), e.g. (190.2 − 7.6) ÷ (14.46 − 4.11) ≈ 17.6."""
    d = data("engines_alfworld/engines.json")
    text = page("engines_alfworld.md")
    tokens = d["args"]["batch"] * d["args"]["new_tokens"]
    by = {r["engine"]: r for r in d["results"]}
    for engine, label in LABELS.items():
        r = by[engine]
        cells = row(text, label)
        want = [
            r["startup_s"],
            r["tokens_per_s"],
            r["tokens_per_s_vs_hf"],
            tokens / r["tokens_per_s"],
            r["rss_mb"],
        ]
        assert_shows([numbers(c)[-1] for c in cells[1:6]], want)
    hf, vllm = by["hf"], by["vllm_merged"]
    saving = tokens / hf["tokens_per_s"] - tokens / vllm["tokens_per_s"]
    prose = flat(text)
    printed = re.search(r"repays itself after \*\*([\d.]+) generate calls\*\*", prose).group(1)
    assert_shows([printed], [(vllm["startup_s"] - hf["startup_s"]) / saving])
    assert_shows(numbers(prose.split("A call of 8 × 31 tokens takes ")[1])[:1], [saving])


def test_engines_alfworld_run_and_evaluations():
    """The preset's run on vLLM-cpu (its logged RL row) and the same checkpoint's evaluation through each engine."""
    run = data("engines_alfworld/run.json")
    prose = flat(page("engines_alfworld.md"))
    rl = run["metrics"][-1]
    assert_shows(numbers(prose.split("the RL iteration: rollout **")[1])[:1], [rl["time_rollout"]])
    assert_shows([re.search(r"update (\d+) s \(10 optimizer steps", prose).group(1)], [rl["time_update"]])
    for engine in ("HF + peft", "vLLM-cpu merged"):
        printed = re.search(re.escape(engine) + r" \*\*([\d.,]+) s\*\*", prose).group(1).replace(",", "")
        key = "hf" if engine.startswith("HF") else "vllm_merged"
        assert_shows([printed], [run["eval_s"][key]])
    rollout = run["eval_rollout_s"]
    assert_shows(
        numbers(prose.split("The same checkpoint evaluated")[1].split(" against **")[0])[-1:], [rollout["hf"]]
    )
    assert_shows([re.search(r"against \*\*(\d+) s\*\*: ([\d.]+)×", prose).group(1)], [rollout["vllm_merged"]])
    assert_shows(
        [re.search(r"against \*\*\d+ s\*\*: ([\d.]+)×", prose).group(1)],
        [rollout["hf"] / rollout["vllm_merged"]],
    )
