"""``hierarl view RUN [RUN_B] -o report.html``: a run's learning curves, kept episodes (subgoal segments, tagged
blocks, reward terms) and before/after eval grid as one self-contained HTML page (``run_data`` reads, ``page``
writes)."""
