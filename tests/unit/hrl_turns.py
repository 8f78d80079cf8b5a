"""Turns of the sub-goal protocols (STEP-HRL, Multi2) for the pure tests of their transitions and targets."""

from actors.trajectory import Decision, Turn

ACTING = ("low", "executor")


def turn(role, *, completion=None, score=None, env_reward=0.0, terminated=False, truncated=False, resp=3):
    """A 4-token prompt and ``resp`` response tokens; acting roles carry an action, ``completion`` the flag."""
    extra = {} if completion is None else {"completion": completion}
    info = {} if score is None else {"score": score}
    return Turn(
        prompt_ids=[1, 2, 3, 4],
        response_ids=list(range(5, 5 + resp)),
        logprobs=[-0.5] * resp,
        decision=Decision(action="a" if role in ACTING else "", extra=extra),
        env_reward=env_reward,
        terminated=terminated,
        truncated=truncated,
        role=role,
        info=info,
    )
