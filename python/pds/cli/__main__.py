"""``python -m pds.cli``: the ``pds`` command."""

from pds.cli import main

main()
