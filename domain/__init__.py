"""The TPU domain: what the hardware, Kueue and the pinned releases are, with no Pulumi in it.

Every other package may use it and it uses nothing of theirs (tests/test_layout.py), so the
catalog, the slice arithmetic and the admission model are tested without an engine.
"""
