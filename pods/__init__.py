"""Programs that run inside pods, each shipped alone in a ConfigMap to a plain Python image.

Different rules from the rest of the repository: one file per pod, the standard library and what
the pod's image ships only (JAX for the slice check), nothing else from this project
(tests/test_layout.py checks both).
"""
