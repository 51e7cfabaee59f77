"""The ``pds`` command: look at and look after datasets, tables and pipelines.

::

    pds ls URL [PREFIX]                 datasets, tables and pipelines below PREFIX
    pds show URL KEY                    schema, version, files, rows (a pipeline: its nodes)
    pds history URL KEY                 a table's or pipeline's versions
    pds scan URL KEY [--columns a,b] [--filter 'id >= 5'] [--limit N] [--stage NAME]
    pds verify URL KEY                  every file's SHA-256 against its manifest
    pds compact URL KEY                 rewrite thinned and small files
    pds vacuum URL KEY [--retain 7d] [--min-age 1h] [--keep-versions] [--apply]
                                        a table's or pipeline's garbage; dry run unless --apply
    pds sync URL KEY [--enable delta]   publish what a table's Delta Lake view lacks
    pds drop URL KEY --yes              remove a table
    pds upgrade URL KEY                 a table or pipeline of an earlier format to this pds's

URL is a store URL or a local folder (relative paths resolve against the
working directory, ``~`` expands). Storage options come from ``--option
key=value`` (repeatable) and, for S3, the ``AWS_*`` environment variables.
``--json`` prints strict JSON (RFC 8259) instead of tables.

Exit codes: 0 success, 1 a store or data error (one line on stderr), 2 a
usage error (a bad option value, filter, key, limit or duration). No
traceback unless ``PDS_DEBUG=1``. No error, title or traceback shows an
``--option`` value or a URL's user info or query string.
"""

from __future__ import annotations

# The command modules register their commands on ``main`` as they are imported.
from pds.cli import _drop, _inspect, _maintain, _scan, _upgrade  # noqa: F401
from pds.cli._args import parse_duration
from pds.cli._filter import FILTER_SYNTAX, parse_filter, typed_filter
from pds.cli._group import main
from pds.cli._output import to_json

__all__ = ["FILTER_SYNTAX", "main", "parse_duration", "parse_filter", "to_json", "typed_filter"]
