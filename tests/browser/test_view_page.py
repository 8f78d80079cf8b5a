"""``hierarl view``'s report opened in Chromium: the curves draw, a click shows an episode with its subgoal segments
and coloured blocks, the filters filter, the eval grid colours each task, and the console stays clean."""

from __future__ import annotations

from launch.cli import main
from tests.chromium import console_errors
from tests.view_runs import TASKS, write_run


def test_the_report_opens_and_an_episode_shows_its_segments_and_blocks(chromium, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = write_run(tmp_path / "run")
    assert main(["view", str(run)]) == 0
    chromium.get((run / "report.html").as_uri())
    css = lambda sel: chromium.find_elements(By.CSS_SELECTOR, sel)  # noqa: E731
    assert len(css(".fig .main-svg")) >= 5  # plotly drew every figure (one svg or more each)
    items = css("#episode-list li")
    assert [li.get_attribute("class") for li in items] == ["won", "lost", "won", "lost"]
    items[1].click()
    assert "selected" in items[1].get_attribute("class")
    turns = css("#episode .turn")
    # segment bands: turns 0-1 serve the first subgoal, turn 2 the second
    assert [t.get_attribute("class") for t in turns] == ["turn seg0", "turn seg0", "turn seg1"]
    kinds = [s.get_attribute("class") for s in turns[0].find_elements(By.CSS_SELECTOR, ".resp span")]
    assert kinds == ["k-switch", "k-subgoal", "k-action"]
    colours = {
        s.value_of_css_property("background-color")
        for s in turns[0].find_elements(By.CSS_SELECTOR, ".resp span")
    }
    assert len(colours) == 3  # each block its own colour
    assert turns[1].find_element(By.CSS_SELECTOR, ".invalid").text == "invalid: no <action> block"
    assert TASKS[1] in css("#episode h3")[0].text and "lost" in css("#episode h3")[0].text
    Select(css("#f-won")[0]).select_by_value("1")
    assert [li.get_attribute("class") for li in css("#episode-list li")] == ["won", "won"]
    Select(css("#f-iter")[0]).select_by_value("2")
    assert len(css("#episode-list li")) == 1
    grid = [r.get_attribute("class") for r in css("table.grid tr")[1:]]
    assert grid == ["gained", "lost"]
    assert console_errors(chromium) == []
