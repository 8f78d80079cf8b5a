"""``bench/gpu_sampler.py``'s statistics: the maximum-likelihood temperature recovers the one samples were drawn at,
and tells it from T = 1 (what a sampler that ignored ``rollout.temperature`` would give); the total-variation distance
is 0 for a sample that matches its distribution exactly. Run as a subprocess: bench scripts set process-wide
environment variables on import."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

CHECK = """
import numpy as np
from gpu_sampler import fit_temperature, total_variation
rng = np.random.default_rng(0)
logp = np.log(rng.dirichlet(np.full(50, 0.3), size=4))  # four peaked next-token distributions, 50 tokens
def draws(t, n=4096):
    z = logp / t
    p = np.exp(z - np.logaddexp.reduce(z, axis=1, keepdims=True))
    return np.stack([rng.choice(50, size=n, p=row / row.sum()) for row in p]), np.log(p)
for t in (1.0, 1.3):
    tokens, logp_t = draws(t)
    fit = fit_temperature(logp, tokens)
    assert abs(fit - t) <= 0.03, (t, fit)
    assert total_variation(logp_t, tokens) < 0.05
p = np.array([[0.5, 0.25, 0.25]])
assert total_variation(np.log(p), np.array([[0, 0, 1, 2]])) == 0.0
assert abs(total_variation(np.log(p), np.array([[1, 1, 1, 1]])) - 0.75) < 1e-12
print("ok")
"""


def test_the_fitted_temperature_is_the_drawn_one_and_tv_is_exact():
    out = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT / "bench", capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
