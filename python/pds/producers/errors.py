"""The exceptions pipelines add to pds's."""

from __future__ import annotations

from typing import Any

from pds.errors import SchemaMismatch

__all__ = ["GraphMismatch", "ProduceError", "produce_error"]


class GraphMismatch(SchemaMismatch):
    """The declared stage graph is not the one the pipeline stores: a node
    with other sources, key or value schema, or a stored node that was not
    declared. A pipeline's graph is fixed when a node is first committed;
    declare it as stored (new nodes may be added), or create a new pipeline."""


class ProduceError(Exception):
    """A stage's ``Produce`` raised. Nothing was committed. ``stage`` and
    ``key`` name where; the original exception is ``__cause__``, and the
    error is also an instance of its class (``except ZeroDivisionError``
    still catches it).

    A batched ``Produce`` is called on a chunk of keys: ``key`` is then the
    chunk's first key and ``last_key`` its last, and the message says
    ``failed on keys <first> … <last>``. For a call on one key,
    ``last_key`` is ``key``."""

    stage: str
    key: Any
    last_key: Any


#: Stands for "the same as the first key" in :func:`produce_error`.
_ONE = object()


def produce_error(error: BaseException, stage: str, key: Any, last_key: Any = _ONE) -> BaseException:
    """An exception naming *stage* and *key* (or the keys *key* to
    *last_key*, for a batched call over several) that is both a
    ``ProduceError`` and of *error*'s own class, where that class allows it."""
    if last_key is _ONE:
        last_key = key
        where = f"key {key!r}"
    else:
        where = f"keys {key!r} … {last_key!r}"
    message = f"stage {stage!r} failed on {where}: {type(error).__name__}: {error}"
    made: BaseException
    try:
        bases: tuple[type, ...] = (ProduceError, type(error))
        cls: Any = type(f"ProduceError[{type(error).__name__}]", bases, {"__module__": __name__})
        made = cls.__new__(cls)
        made.args = (message,)
        str(made)
    except Exception:  # noqa: BLE001 - any class that cannot be mixed in gets the plain one
        made = ProduceError(message)
    made.stage = stage  # type: ignore[attr-defined]
    made.key = key  # type: ignore[attr-defined]
    made.last_key = last_key  # type: ignore[attr-defined]
    return made
