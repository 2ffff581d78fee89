"""URLs of the addresses one component hands another (no Pulumi)."""

from __future__ import annotations


def http_url(address: str, path: str = "") -> str:
    """`http://` URL of a load balancer's address; IPv6 addresses need brackets."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}{path}"
