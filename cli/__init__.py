"""Command-line tools: tileops-db (the tuning database), tileops-tune and tileops-bench."""


def wide_console(stderr: bool = False) -> "Console":
    """A rich console that keeps tables on one line per row when output is piped (logs, CI)."""
    from rich.console import Console

    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=200)
