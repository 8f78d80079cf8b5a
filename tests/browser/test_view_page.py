"""``hierarl view``'s report opened in Chromium: the curves draw, a click shows an episode with its subgoal segments
and coloured blocks, the filters filter, the eval grid colours each task, and the console stays clean."""

from __future__ import annotations

from launch.cli.main import main
from tests.chromium import console_errors, open_page
from tests.view_runs import TASKS, write_run


def test_the_report_opens_and_an_episode_shows_its_segments_and_blocks(chromium, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = write_run(tmp_path / "run")
    assert main(["view", str(run)]) == 0
    open_page(chromium, run / "report.html")
    css = lambda sel: chromium.find_elements(By.CSS_SELECTOR, sel)  # noqa: E731
    assert len(css(".fig .main-svg")) >= 5  # plotly drew every figure (one svg or more each)
    Select(css("#f-source")[0]).select_by_value("eval")  # every evaluation episode: after BC, after RL
    assert [li.text.split(" · ")[0] for li in css("#episode-list li")] == ["eval it 0"] * 2 + [
        "eval it 2"
    ] * 2
    Select(css("#f-source")[0]).select_by_value("train")
    items = css("#episode-list li")
    assert [li.get_attribute("class") for li in items] == ["won", "lost", "won", "lost"]
    items[1].click()
    assert "selected" in items[1].get_attribute("class")
    turns = css("#episode .turn")
    # segment bands: turns 0-1 serve the first subgoal, turn 2 the second
    assert [t.get_attribute("class") for t in turns] == ["turn seg0", "turn seg0", "turn seg1"]
    tokens = lambda k: turns[k].find_elements(By.CSS_SELECTOR, ".resp span")  # noqa: E731
    assert [s.get_attribute("class") for s in tokens(1)] == [
        "tok g-switch",
        "tok g-subgoal_keep",
        "tok g-action",
    ]
    assert len({s.value_of_css_property("background-color") for s in tokens(0)}) == 3  # each block its colour
    assert tokens(2)[2].get_attribute("title") == "action: A = -1.0000"
    assert turns[1].find_element(By.CSS_SELECTOR, ".invalid").text == "invalid: no <action> block"
    assert TASKS[1] in css("#episode h3")[0].text and "lost" in css("#episode h3")[0].text
    assert "values: v_high 0.250, v_low 0.500" in turns[0].text
    Select(css("#f-colour")[0]).select_by_value(
        "adv"
    )  # the lost episode: red, the action (|A| = 1) the deepest
    turns = css("#episode .turn")
    shades = [s.value_of_css_property("background-color") for s in tokens(2)]
    # |A| / max |A| = 0.5 → 255 (1 − 0.75 · 0.5) = 159.4 → 159; the action's 1 → 255 · 0.25 = 63.75 → 64
    assert shades == ["rgba(255, 159, 159, 1)", "rgba(255, 159, 159, 1)", "rgba(255, 64, 64, 1)"]
    Select(css("#f-won")[0]).select_by_value("1")
    assert [li.get_attribute("class") for li in css("#episode-list li")] == ["won", "won"]  # train, won
    Select(css("#f-iter")[0]).select_by_value("2")
    assert len(css("#episode-list li")) == 1
    grid = [r.get_attribute("class") for r in css("table.grid tr")[1:]]
    assert grid == ["gained", "lost"]
    assert console_errors(chromium) == []
