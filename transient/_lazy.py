"""Modules imported on their first use, not on import.

Analysing one big log reads it before it needs pandas: importing pandas takes about as long as reading
tens of MB of log and holds tens of MB of memory, so the modules on that path bind ``pd`` to a
`LazyModule` and pandas is imported when a table is first made, after the log's per-ms reduction (whose
memory is then mostly freed).
"""

from __future__ import annotations

import importlib
import threading
import types


class LazyModule(types.ModuleType):
    """Stands for module ``name``: the first attribute looked up imports it (once, under a lock, so
    threads wait for one import), and every attribute is then the module's own."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._lazy_lock = threading.Lock()
        self._lazy_module: types.ModuleType | None = None

    def _load(self) -> types.ModuleType:
        with self._lazy_lock:
            if self._lazy_module is None:
                self._lazy_module = importlib.import_module(self.__name__)
        return self._lazy_module

    def __getattr__(self, attr: str):  # only for what this object lacks: the module's attributes
        if attr.startswith("_lazy_"):
            raise AttributeError(attr)
        value = getattr(self._load(), attr)
        setattr(self, attr, value)  # later lookups skip this method
        return value


_MODULES: dict[str, LazyModule] = {}


def lazy_module(name: str) -> LazyModule:
    """The one `LazyModule` standing for module ``name`` (shared by every module that asks)."""
    return _MODULES.setdefault(name, LazyModule(name))
