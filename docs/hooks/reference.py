"""MkDocs hooks: the configuration reference, generated from the schema at build time,
and the docstrings' Sphinx roles made plain.

A page holding the line ``<!-- config-reference -->`` gets, in its place, one table per
config table (``mpievo.config.schema_tables``): every key with its type, default and
meaning, as ``mpievo run --help-config`` prints them. Nothing is copied by hand.
"""

from __future__ import annotations

import re

MARKER = "<!-- config-reference -->"
#: a Sphinx role before its code span (":class:`X`" renders as ":class:<code>X</code>")
SPHINX_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj|const):(?=<code>)")
#: reStructuredText's literal-block marker ending a paragraph ("Example::"): one colon, as rst shows it
RST_LITERAL = re.compile(r"::</p>")


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, config_reference())


def on_page_content(html: str, page, config, files) -> str:
    """The docstrings use Sphinx roles and rst's "::", which mkdocstrings leaves as text."""
    return RST_LITERAL.sub(":</p>", SPHINX_ROLE.sub("", html))


def config_reference() -> str:
    """Markdown: a section per table, a row per key."""
    from mpievo.config import PER_ISLAND_NOTE, as_toml, schema_tables
    from mpievo.schema import Settings

    parts = []
    for cls in schema_tables():
        parts.append(f"## `[{cls.TABLE}]`\n")
        if cls.TABLE == "engine":
            parts.append(f"Every key: {PER_ISLAND_NOTE}.\n")
        parts.append("| key | type | default | meaning |\n|---|---|---|---|")
        for name, key in cls.keys().items():
            if isinstance(key.default, Settings):      # a nested table: its own section
                continue
            parts.append(f"| `{name}` | {_cell(key.check.expected)} | `{_cell(as_toml(key.default))}` "
                         f"| {_cell(key.doc)} |")
        parts.append("")
    return "\n".join(parts)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")
