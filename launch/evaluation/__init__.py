"""Evaluation: panels of (task, env seed) pairs, the baselines, scoring a policy's episodes, intervals and the
papers' tables (no Ray; ``launch.driver.evaluator`` plays a panel through the rollout pool)."""
