"""Runnable examples (``python -m examples.<name>`` or ``aiorocket run examples.worker:app``)."""
