"""Cloud Storage's naming rules for buckets and objects: standard library only.

From Google's naming pages (cloud.google.com/storage/docs/buckets#naming and
/storage/docs/objects#naming), whose refusals googleapis/storage-testbench plays
(`gcs/bucket.py`, `validate_bucket_name`). Names that break them fail when the bucket or
object is first touched: the Saxml admin bucket on `pulumi up`, a weights path when the
model servers start, hours into a TPU bill.
"""

from __future__ import annotations

import ipaddress
import re

from settings.names import NameRule, character_problem

BUCKET_CHARS = NameRule(r"[a-z0-9._-]+", "lowercase letters, digits, '-', '_' and '.'")
# "google" and close misspellings are refused anywhere in a name (storage-testbench's pattern).
GOOGLE_LIKE = re.compile(r"g[o0][o0]g[l1][e3]")
BUCKET_ALLOWED = (
    "allowed: 3 to 63 lowercase letters, digits, '-', '_' and '.' (up to 222 with dots, each dot-separated "
    "part 1 to 63), starting and ending with a letter or digit, not an IP address, not starting with "
    "'goog', not containing 'google' or a look-alike such as 'g00gle'"
)
OBJECT_MAX_BYTES = 1024
# The prefixes of the weights bucket the model servers may write and delete in (workloads/bucket_access.py):
# vLLM's compilation cache (VLLM_XLA_CACHE_PATH, workloads/vllm_command.py) and the Pathways scratch
# location (--gcs_scratch_location, workloads/jetstream.py), and the serving benchmark's results
# (workloads/benchmark_job.py). Nothing the servers must read may live there.
XLA_CACHE_PREFIX = "xla_cache/"
PATHWAYS_SCRATCH_PREFIX = "pathways-scratch/"
BENCHMARK_PREFIX = "benchmarks/"
WRITABLE_PREFIXES = (XLA_CACHE_PREFIX, PATHWAYS_SCRATCH_PREFIX, BENCHMARK_PREFIX)
OBJECT_ALLOWED = (
    f"allowed: 1 to {OBJECT_MAX_BYTES} bytes of UTF-8 without control characters (NUL, CR, LF, ...), invisible "
    "format characters (U+200B, U+FEFF), spaces other than U+0020 or compatibility forms NFKC changes (fullwidth "
    "letters), with no '.' or '..' segment and no empty segment ('//')"
)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


def bucket_problem(name: str) -> str | None:
    """Why Cloud Storage refuses bucket `name` (a phrase), or None: the first rule it breaks."""
    parts = name.split(".")
    google = GOOGLE_LIKE.search(name)
    rules = (
        (not BUCKET_CHARS.matches(name), f"characters outside {BUCKET_CHARS.allowed}"),
        (len(parts) == 1 and not 3 <= len(name) <= 63, f"{len(name)} characters, not 3 to 63"),
        (len(parts) > 1 and not 3 <= len(name) <= 222, f"{len(name)} characters, not 3 to 222"),
        (any(not 1 <= len(part) <= 63 for part in parts), "an empty dot-separated part or one over 63 characters"),
        (not (name[:1].isalnum() and name[-1:].isalnum()), "a first or last character that is not a letter or digit"),
        (_is_ip(name), "the form of an IP address"),
        (name.startswith("goog"), "the reserved prefix 'goog'"),
        (google is not None, f"'{google.group(0) if google else ''}' in it (Google's names are reserved)"),
    )
    return next((phrase for broken, phrase in rules if broken), None)


def object_path_problem(path: str) -> str | None:
    """Why `path` is no usable object name or prefix inside a bucket (a phrase), or None.

    Cloud Storage itself refuses CR and LF, the names '.' and '..', and names over 1,024 bytes; the
    readers this program runs (the Run:ai streamer, gcsfuse, gsutil-style prefixes) take a '.', '..'
    or empty segment as a directory step and look for objects that do not exist. An invisible or
    look-alike character (settings/names.py) makes a name the reader of the stack cannot see.
    """
    characters = character_problem(path)
    if characters:
        return characters
    if len(path.encode("utf-8")) > OBJECT_MAX_BYTES:
        return f"{len(path.encode('utf-8'))} bytes"
    segments = path.rstrip("/").split("/")
    if any(segment in (".", "..") for segment in segments):
        return "a '.' or '..' segment"
    if path and any(segment == "" for segment in segments):
        return "an empty segment"
    return None
