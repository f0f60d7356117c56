"""A memo of node outcomes in a dict, for both fitting steps' memo protocols (GPTQ's ``get``/``put``, bias
correction's ``get_bias``/``put_bias``), counting the lookups that found one."""

from __future__ import annotations

from typing import Any


class DictMemo:
    """Node outcomes kept in ``kept`` by key; ``found`` counts the lookups that found one."""

    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}
        self.found = 0

    def get(self, key: str) -> Any:
        node = self.kept.get(key)
        self.found += node is not None
        return node

    def put(self, key: str, value: Any) -> None:
        self.kept[key] = value

    get_bias, put_bias = get, put
