"""Kubernetes quantities written the way the API server writes them back.

Controllers whose webhooks decode an object into Go types (Kueue's ClusterQueue defaulting, for
one) store each quantity in canonical form, `30720Gi` as `30Ti` (k8s.io/apimachinery
pkg/api/resource/quantity.go, `CanonicalizeBytes`: the largest binary suffix with a whole
mantissa). A value the program writes any other way differs from the live object on every
`pulumi preview` after the first `up` (the real API server under tests/test_cluster_up.py showed
it), so binary amounts are written canonically here.
"""

from __future__ import annotations

_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def binary(gib: int) -> str:
    """`gib` GiB as the API server writes it: `30720` -> `30Ti`, `13600` -> `13600Gi`, `0` -> `0`."""
    if gib < 0:
        raise ValueError(f"a negative amount of memory: {gib} GiB")
    if gib == 0:
        return "0"
    value, index = gib, _BINARY_SUFFIXES.index("Gi")
    while value % 1024 == 0 and index + 1 < len(_BINARY_SUFFIXES):
        value //= 1024
        index += 1
    return f"{value}{_BINARY_SUFFIXES[index]}"


_DECIMAL_SUFFIXES = {-3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def decimal(value: float) -> str:
    """A non-negative number in thousandths or coarser, as the API server writes it back (quantity.go
    `CanonicalizeBytes` for DecimalSI: the mantissa's trailing zeros go into the exponent, which is
    kept a multiple of three): `8000` -> `8k`, `1500` -> `1500`, `0.8` -> `800m`, `12` -> `12`."""
    milli = round(value * 1000)
    if value < 0 or abs(milli - value * 1000) > 1e-6:
        raise ValueError(f"{value!r} is not a non-negative number of thousandths")
    if milli == 0:
        return "0"
    mantissa, exponent = milli, -3
    while mantissa % 1000 == 0 and exponent + 3 in _DECIMAL_SUFFIXES:
        mantissa //= 1000
        exponent += 3
    return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"
