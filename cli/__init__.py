"""Command-line tools: tileops-db (the tuning database), tileops-tune and tileops-bench."""

# Where nothing says how wide the output is (a pipe without $COLUMNS): a terminal's classic width.
PIPE_WIDTH = 80


def wide_console(stderr: bool = False) -> "Console":
    """A rich console as wide as the terminal, or as $COLUMNS says, else 80 columns (a pipe)."""
    import os

    from rich.console import Console

    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return probe
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH)


def printable(text: str) -> str:
    """``text`` with control and other unprintable characters shown as escapes (\\x1b, \\n), so
    that text from a database can never drive the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))
