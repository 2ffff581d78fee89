"""The currencies a price may be given in: ISO 4217's list, as pycountry ships it.

pycountry (pinned in requirements.txt) carries Debian's iso-codes data, which follows the ISO 4217
maintenance agency's amendments. Its file is read directly, not through `import pycountry`: the
package reads its own distribution metadata when imported (pycountry/__init__.py `get_version`),
about a third of a second, which every `pulumi preview` of a priced stack would pay for one list.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

# ISO 4217's codes that name no currency: "XTS" is reserved for testing and "XXX" means that no
# currency is involved (their names in the list itself); a price in either is not a price.
NOT_MONEY = frozenset({"XTS", "XXX"})


@functools.cache
def iso_4217() -> frozenset[str]:
    """Every ISO 4217 alphabetic code of a currency, fund or unit of account, but NOT_MONEY."""
    spec = importlib.util.find_spec("pycountry")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pycountry is not installed: run `make` (requirements.txt pins it)")
    path = Path(next(iter(spec.submodule_search_locations))) / "databases" / "iso4217.json"
    entries = json.loads(path.read_text(encoding="utf-8"))["4217"]
    return frozenset(entry["alpha_3"] for entry in entries) - NOT_MONEY
