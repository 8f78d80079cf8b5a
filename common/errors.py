"""The one error a run stops on by design: a reason the user can act on, printed by ``hierarl train`` as one line
(exit 1) instead of a traceback."""


class RunStopped(RuntimeError):
    """A run cannot go on (restarts used up, no space for a checkpoint, no usable data for a stage); the message
    says why and what to change. What the run wrote so far stays in its run folder."""
