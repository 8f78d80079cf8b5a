"""Turns of the ReAct protocol for the pure tests of HISR's segmentation, reward models and targets."""

from actors.trajectory import Decision, Trajectory, Turn


def make_turn(response, *, obs="o", text="Thought: t\nAction: a", action="a", switch=None, valid=True, **kw):
    return Turn(
        prompt_ids=[1, 2, 3],
        response_ids=response,
        logprobs=[-0.5] * len(response),
        decision=Decision(action=action, valid=valid, switch=switch),
        observation=obs,
        response_text=text,
        **kw,
    )


def make_traj(turns, *, won=False, tid="x"):
    return Trajectory(tid, "g", "t", "synthetic", turns, task="do it", status="finished", won=won)
