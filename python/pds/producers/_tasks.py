"""What a pipeline update hands to the code that runs its stages and
sources (in this process, in local worker processes, or on Spark): the
tasks, their results, and the runners' signatures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypedDict

from pds.producers.graph import Node

__all__ = ["ChainLink", "ChainRunner", "SourceRunner", "SourceTask", "StageDone", "StageRunner", "StageTask"]


class _Opts(TypedDict):
    compression: str
    target_rows: int
    sort_budget: int


class StageTask(NamedTuple):
    """One stage's update to run: the stage, its engine view (with its
    stored state), its sources' views (at the versions just updated), the
    value column names of each source (the row form's dicts), whether every
    source key counts as changed (a first build or rebuild), and the engine
    options (``compression``, ``target_rows``, ``sort_budget``)."""

    node: Node
    stage_view: str
    source_views: list[str]
    values: list[list[str]]
    rebuild: bool
    opts: _Opts


class StageDone(NamedTuple):
    """A stage's new state (JSON), the rows handed to ``Produce`` and emitted."""

    state: str
    rows_in: int
    rows_out: int


#: Runs a :class:`StageTask`; appends every object it writes to the list
#: (removed if the update fails), and removes what it wrote itself if it
#: raises.
StageRunner = Callable[[StageTask, list[str]], StageDone]


class ChainLink(NamedTuple):
    """One stage of a chain run as one job (:data:`ChainRunner`): its task,
    and for each of its sources the index of the chain's stage that feeds
    it (``None``: a node done before the chain). The views of sources fed
    by the chain hold their stored state: the runner replaces it with the
    state the chain gives them."""

    task: StageTask
    fed_by: list[int | None]


#: Runs a chain of stages (:class:`ChainLink`, in node order, each
#: depending only on nodes done or earlier in it) as one job, where the
#: stage runner offers it (its ``chain`` attribute); returns what each of
#: a leading run of them did: a :class:`StageDone`, or ``None`` for a stage
#: none of whose sources changed (its state is kept). The stages it did not
#: return are run after, as usual. Objects as :data:`StageRunner`.
ChainRunner = Callable[[list[ChainLink], list[str]], list[StageDone | None]]


class SourceTask(NamedTuple):
    """One source's change to apply: the source, its engine view (with its
    stored state), the change as the update's checks left it (a
    ``pipeline._Change`` locally; the Spark runner's own form on Spark), and the
    engine options (``compression``, ``target_rows``, ``sort_budget``)."""

    node: Node
    view: str
    change: Any
    opts: _Opts


#: Applies a :class:`SourceTask` and returns the source's new state (JSON);
#: appends every object it writes to the list (removed if the update
#: fails), and removes what it wrote itself if it raises.
SourceRunner = Callable[[SourceTask, list[str]], str]
