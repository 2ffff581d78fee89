"""Where Helm pulls the controllers' charts from: an OCI registry and a repository path, standard library only.

`controllers.chartRegistry` stands in for `oci://registry.k8s.io`; the chart of each component is
`<chartRegistry>/<component>/charts/<component>` (k8s/controllers.py), the layout registry.k8s.io
serves and a mirror of it (an Artifact Registry remote repository) repeats. The rules:

* Helm treats a chart reference as an OCI one only when it starts with `oci://`, case and all
  (Helm v3.18.6 pkg/registry/util.go `IsOCI`, `OCIScheme` in constants.go); anything else is read
  as a chart repository or archive URL, so `https://` is refused with "use oci://";
* then a registry host, a DNS name or IPv4 address with an optional port, and repository path
  components in the OCI distribution spec's grammar (spec.md, "Pulling manifests": `<name>` is
  `[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*` per `/`-separated component);
* Helm's client takes a `:tag` or `@digest` after the path as the chart's version (pkg/registry/
  client.go `Pull`, via reference.go), which `versions.*` pins instead; a query, a fragment or a
  trailing `/` make a repository name no registry serves; and credentials in the reference would be
  kept in the Pulumi state and the plan (`helm registry login` or a credential helper holds them).

A refusal shows the reference through `shown`: userinfo (with or without the `//`), a query and a
fragment are masked, since a token rides in any of them (settings/credentials.py refuses the ones it
recognises before this runs; `shown` keeps the others out of the message too).
"""

from __future__ import annotations

import ipaddress
import re

DEFAULT = "oci://registry.k8s.io"
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DOTTED_NUMBERS = re.compile(r"[0-9.]+")
_COMPONENT = re.compile(r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*")
_HOST_MAX = 253  # RFC 1035 §2.3.4, written without the final dot
ALLOWED = (
    "allowed: oci://<host>[:<port>][/<path>], e.g. oci://us-docker.pkg.dev/my-project/k8s-mirror: the host a DNS "
    "name or IPv4 address, the port 1 to 65535, each path component lowercase letters and digits joined by '.', "
    "'_', '__' or '-' (the OCI distribution spec's repository name); no trailing '/', credentials, query, "
    "fragment, tag or digest"
)


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*:)?(/*)")


def shown(value: str) -> str:
    """`value` as a message may show it: whatever stands before an '@' of the host part (credentials,
    with or without the `//` after the scheme) and any query or fragment (`?access_token=...`, where a
    token rides as often) are masked; the host and the path stay, to say what was refused."""
    cut = min((i for i in (value.find("?"), value.find("#")) if i >= 0), default=len(value))
    head, tail = value[:cut], (value[cut] + "***" if cut < len(value) else "")
    start = _SCHEME.match(head)
    prefix = start.group() if start and start.group(2) else ""  # `user:password@host` has no scheme
    authority, slash, path = head[len(prefix) :].partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{prefix}{authority}{slash}{path}{tail}"


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def _host_problem(authority: str) -> str | None:
    host, colon, port = authority.partition(":")
    if not host:
        return "names no registry host"
    if host.startswith("["):
        return "has an IPv6 host"
    if colon and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"has the port {port!r}, not a number 1 to 65535"
    if _DOTTED_NUMBERS.fullmatch(host):  # all digits and dots: only an IPv4 address, never a DNS name
        return None if _is_ipv4(host) else f"has the host {host!r}, which is no IPv4 address"
    if len(host) > _HOST_MAX or not _HOST.fullmatch(host):
        return f"has the host {host!r}, which is no DNS name (letters, digits and '-' in dot-separated labels)"
    return None


def _path_problem(path: str) -> str | None:
    for component in path.split("/"):
        if "@" in component:
            return "names a digest ('@...'): the chart's version is versions.* instead"
        if ":" in component:
            return "names a tag (':...'): the chart's version is versions.* instead"
        if not _COMPONENT.fullmatch(component):
            what = "an empty path component ('//')" if not component else f"the path component {component!r}"
            return f"has {what}, which is no OCI repository name component"
    return None


def _scheme_problem(scheme: str, sep: str) -> str | None:
    if not sep:
        return "has no scheme: Helm pulls a chart from a registry only by an oci:// reference; use oci://"
    if scheme.lower() in ("http", "https"):
        return f"uses {scheme}://, which Helm reads as a chart repository or archive URL, not a registry; use oci://"
    if scheme != "oci":
        case = " (it reads the scheme case-sensitively)" if scheme.lower() == "oci" else ""
        return f"has the scheme {scheme}://, which Helm does not read as a registry{case}; use oci://"
    return None


def _extras_problem(rest: str, authority: str) -> str | None:
    if "?" in rest or "#" in rest:
        return "has a query or fragment ('?', '#'), which no repository name carries"
    if "@" in authority:
        return (
            "carries credentials ('user:password@'), which the Pulumi state and the plan would keep; use "
            "`helm registry login` or a credential helper"
        )
    return None


def problem(value: str) -> str | None:
    """Why `value` is no registry Helm pulls the charts from (a phrase to follow the value), or None."""
    if any(c.isspace() or not c.isprintable() for c in value):
        return "has whitespace or a control character"
    scheme, sep, rest = value.partition("://")
    authority, slash, path = rest.partition("/")
    trailing = "ends with '/': the chart path is joined to it with one" if value.endswith("/") else None
    return (
        _scheme_problem(scheme, sep)
        or _extras_problem(rest, authority)
        or _host_problem(authority)
        or trailing
        or (_path_problem(path) if slash else None)
    )
