// hierarl view: draws the embedded figures with plotly and renders the episode browser from the embedded JSON.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("data").textContent);
  data.figures.forEach((fig, i) => Plotly.newPlot("fig" + i, fig.data, fig.layout, { responsive: true }));

  const eps = data.episodes;
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fill = (select, values, label) => {
    select.appendChild(new Option("all", ""));
    values.forEach((v) => select.appendChild(new Option(label(v), String(v))));
  };
  const mode = document.getElementById("f-colour");
  const scale = Math.max(1e-9, ...eps.flatMap((e) => e.turns.flatMap((t) => t.tokens.map((k) => Math.abs(k.adv)))));
  document.getElementById("adv-scale").textContent = scale.toFixed(3);
  // blue for a positive advantage, red for a negative one, white at 0; saturated at the page's largest |A|
  function advColour(a) {
    const x = Math.min(1, Math.abs(a) / scale);
    const fade = Math.round(255 * (1 - 0.75 * x));
    return a >= 0 ? `rgb(${fade}, ${fade}, 255)` : `rgb(255, ${fade}, ${fade})`;
  }
  let current = null;
  const fIter = document.getElementById("f-iter");
  const fTask = document.getElementById("f-task");
  const fWon = document.getElementById("f-won");
  const fSource = document.getElementById("f-source");
  fill(fSource, [...new Set(eps.map((e) => e.source))], (v) => v);
  fill(fIter, [...new Set(eps.map((e) => e.iteration))].sort((a, b) => a - b), (v) => String(v));
  fill(fTask, [...new Set(eps.map((e) => e.task_id))].sort(), (v) => v);

  function showEpisode(ep) {
    current = ep;
    const box = document.getElementById("episode");
    box.replaceChildren();
    box.appendChild(el("h3", "", `${ep.source}: ${ep.task_id}, iteration ${ep.iteration}: ${ep.won ? "won" : "lost"} ` +
      `(${ep.status}), return ${ep.return.toFixed(3)}`));
    ep.turns.forEach((t, k) => {
      const turn = el("div", "turn seg" + (t.segment % 6));
      turn.dataset.segment = t.segment;
      turn.appendChild(el("div", "obs", t.observation));
      const resp = el("div", "resp");
      if (t.tokens.length) {
        // kept episodes: one span a token, its group's class and, coloured by advantage, its own shade
        t.tokens.forEach((k) => {
          const span = el("span", "tok g-" + k.group + (k.in_loss ? "" : " no-loss"), k.piece);
          span.title = `${k.group}: A = ${k.adv.toFixed(4)}` + (k.in_loss ? "" : " (not in the loss)");
          span.dataset.adv = k.adv;
          if (mode.value === "adv") span.style.backgroundColor = advColour(k.adv);
          resp.appendChild(span);
        });
      } else {
        t.spans.forEach((s) => resp.appendChild(el("span", "k-" + s.kind, s.text)));
      }
      turn.appendChild(resp);
      const meta = el("div", "meta");
      meta.appendChild(el("span", "", `turn ${k} · segment ${t.segment} `));
      if (t.switch === true) meta.appendChild(el("span", "switched", "SWITCH"));
      if (!t.valid) meta.appendChild(el("span", "invalid", "invalid: " + (t.error || "format")));
      const terms = Object.entries(t.shaped).map(([n, v]) => `${n} ${v.toFixed(3)}`).join(", ");
      meta.appendChild(el("span", "", ` · env reward ${t.env_reward.toFixed(3)}` + (terms ? ` · ${terms}` : "")));
      const values = Object.entries(t.values).map(([n, v]) => `${n} ${v.toFixed(3)}`).join(", ");
      if (values) meta.appendChild(el("span", "values", ` · values: ${values}`));
      turn.appendChild(meta);
      box.appendChild(turn);
    });
  }

  function renderList() {
    const list = document.getElementById("episode-list");
    list.replaceChildren();
    const shown = eps.filter((e) => (fIter.value === "" || String(e.iteration) === fIter.value) &&
      (fTask.value === "" || e.task_id === fTask.value) &&
      (fWon.value === "" || String(Number(e.won)) === fWon.value) &&
      (fSource.value === "" || e.source === fSource.value));
    shown.forEach((ep) => {
      const where = ep.source === "train" ? "" : `${ep.source} `;
      const li = el("li", ep.won ? "won" : "lost", `${where}it ${ep.iteration} · ${ep.task_id} · ${ep.turns.length} turns`);
      li.addEventListener("click", () => {
        list.querySelectorAll("li.selected").forEach((x) => x.classList.remove("selected"));
        li.classList.add("selected");
        showEpisode(ep);
      });
      list.appendChild(li);
    });
    if (!shown.length) list.appendChild(el("li", "", eps.length ? "no episode matches" : "no episodes kept"));
  }
  [fIter, fTask, fWon, fSource].forEach((s) => s.addEventListener("change", renderList));
  mode.addEventListener("change", () => current && showEpisode(current));
  renderList();
  document.body.dataset.ready = "1"; // the page is drawn (what a test waits for)
})();
