"""Command-line tools: tileops-db (the tuning database), tileops-tune and tileops-bench."""


def wide_console(stderr: bool = False) -> "Console":
    """A rich console that keeps tables on one line per row when output is piped (logs, CI)."""
    import os

    from rich.console import Console

    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return probe
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=max(200, int(columns) if columns.isdigit() else 0))
