"""The tpu-slicing-guardrails policy pack (policies in `policy.guardrails`, entry point in `__main__.py`)."""
