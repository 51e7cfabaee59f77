"""Producers: sorted, incremental map/reduce stages over Parquet (see
:class:`pds.Pipeline`)."""

from pds.producers.changes import Changes
from pds.producers.errors import GraphMismatch, ProduceError
from pds.producers.graph import Node
from pds.producers.pipeline import Pipeline

__all__ = ["Changes", "GraphMismatch", "Node", "Pipeline", "ProduceError"]
