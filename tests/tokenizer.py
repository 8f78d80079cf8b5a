"""The suite-wide ``tok`` fixture (``tests/conftest.py``): the packaged SmolLM2's tokenizer, the one the runs use,
loaded once for every test that renders prompts, masks or demonstrations into token ids."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tok():
    import transformers

    from actors.models import resolve_model_path

    return transformers.AutoTokenizer.from_pretrained(resolve_model_path("smollm2"))
