"""Resolve the ``"package.module:function"`` name of an isolated child's registry factory."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

#: ``package.module:function`` (dotted module path, one attribute name)
FACTORY_PATTERN = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*")


def load_factory(name: str) -> Callable[[], Any]:
    """Import the module of ``name`` and return its factory (not called here).

    Args:
        name: ``"package.module:function"``; the function takes no argument and
            returns a :class:`~reliable_queue.TaskRegistry`.

    Returns:
        The function.

    Raises:
        ValueError: ``name`` is not of that form, its module cannot be imported, or the
            attribute is missing or not callable (the message says which).
    """
    if not isinstance(name, str) or not FACTORY_PATTERN.fullmatch(name):
        raise ValueError(f"isolated_registry must be 'package.module:function', not {name!r}")
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"isolated_registry {name!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"isolated_registry {name!r}: {module_name} has no function {attr!r}")
    return factory
