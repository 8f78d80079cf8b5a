"""Agent protocols as pure prompt builders and response parsers, one module per protocol.

``parsing`` (shared tag scanner, char-span → token masks, ``render_prompt``), ``react`` (ReAct baseline),
``plan_execute`` (HiPER), ``hipif`` (HIPIF), ``step_hrl`` (STEP-HRL), ``multi2`` (Multi2).  Import the module you
need; this package imports nothing, so it stays free of ray / vllm / deepspeed.
"""
