"""What both wings share and neither owns: the LoRA adapter spec, the dtype rule, progress lines. Imports nothing
else of the project (``tests/unit/test_import_graph.py``)."""
