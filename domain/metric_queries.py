"""Which metrics and labels a PromQL expression or a Cloud Monitoring filter names: the text only (no Pulumi).

domain/metric_catalog.py checks what these find against its entries (`unknown_metrics`, `unpublished_labels`).
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------
# Which metrics a query reads.
# ---------------------------------------------------------------------------
_FILTER_METRIC = re.compile(r'metric\.type\s*=\s*"([^"]+)"')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-z]+")
_TOKEN = re.compile(r"(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)")
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                       "offset", "bool", "inf", "nan", "atan2"})  # fmt: skip


def promql_metric_names(query: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords, labels and strings excluded)."""
    text = _STRING.sub('""', query)
    text = _LABEL_LIST.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers (their values are already blanked)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery selectors
    names: set[str] = set()
    for match in _TOKEN.finditer(text):
        name = match.group("name")
        if name is None or name.lower() in _KEYWORDS:
            continue
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or aggregation
        names.add(name)
    return names


def filter_metric_names(monitoring_filter: str) -> set[str]:
    """Metric types a Cloud Monitoring filter selects (`metric.type="..."`)."""
    return set(_FILTER_METRIC.findall(monitoring_filter))


def metric_names(query: str) -> set[str]:
    """Every metric a PromQL expression or a Monitoring filter references."""
    if _FILTER_METRIC.search(query):
        return filter_metric_names(query)
    return promql_metric_names(query)


# ---------------------------------------------------------------------------
# Which labels a query names.
# ---------------------------------------------------------------------------
_SELECTOR = re.compile(r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{(?P<body>[^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?P<kind>by|without|on|ignoring|group_left|group_right)\s*\((?P<labels>[^)]*)\)")
_LABEL_MAKERS = re.compile(r"\blabel_(?:replace|join)\s*\(")


def _blank_strings(query: str) -> str:
    """The query with every string literal's content replaced by spaces (offsets kept)."""
    return _STRING.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1], query)


def _group_end(text: str, start: int) -> int:
    """The index just past the parenthesis closing the one at `start`."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index + 1
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _group_start(text: str, end: int) -> int:
    """The index of the parenthesis opening the one that closes at `end - 1`."""
    depth = 0
    for index in range(end - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _made_labels(query: str, blank: str, start: int, end: int) -> set[str]:
    """Labels that label_replace / label_join create inside query[start:end] (their second argument)."""
    made: set[str] = set()
    for match in _LABEL_MAKERS.finditer(blank, start, end):
        depth, index = 0, match.end()
        while index < end and not (depth == 0 and blank[index] == ","):
            depth += {"(": 1, ")": -1}.get(blank[index], 0)
            index += 1
        string = _STRING.match(query[index + 1 :].lstrip())
        if string:
            made.add(string.group(0)[1:-1])
    return made


def _label_names(text: str) -> list[str]:
    return [label.strip() for label in text.split(",") if label.strip()]


def label_uses(query: str) -> set[tuple[str, str]]:
    """Every (metric, label) pair a PromQL expression relies on.

    A matcher `m{l="v"}` names l on m. A `by (...)` / `without (...)` clause names its labels on every metric
    of the aggregation's argument (either form: `sum by (l) (expr)` or `sum (expr) by (l)`), except labels a
    label_replace / label_join inside that argument creates. `on (...)`, `ignoring (...)`, `group_left (...)`
    and `group_right (...)` are checked against every metric of the whole query (stricter than PromQL needs).
    """
    blank = _blank_strings(query)
    uses: set[tuple[str, str]] = set()
    for selector in _SELECTOR.finditer(blank):
        name = selector.group("name")
        if name:
            uses |= {(name, label) for label in _MATCHER.findall(selector.group("body"))}
    every = promql_metric_names(query)
    for grouping in _GROUPING.finditer(blank):
        labels = _label_names(grouping.group("labels"))
        if grouping.group("kind") not in ("by", "without"):
            uses |= {(name, label) for name in every for label in labels}
            continue
        after = grouping.end() + len(blank[grouping.end() :]) - len(blank[grouping.end() :].lstrip())
        if after < len(blank) and blank[after] == "(":
            start, end = after, _group_end(blank, after)
        else:
            end = len(blank[: grouping.start()].rstrip())
            start = _group_start(blank, end)
        made = _made_labels(query, blank, start, end)
        names = promql_metric_names(query[start:end])
        uses |= {(name, label) for name in names for label in labels if label not in made}
    return uses
