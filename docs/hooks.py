"""mkdocs hooks: the API pages show the docstrings' Sphinx roles as code.

The docstrings name other calls as ``:meth:`history```; Markdown renders the
backticks as code and leaves the role's name before it. This drops the role.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:meth|func|class|mod|attr|exc|data|obj):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub("", html)
