"""Tasks: plain and ``async def`` functions registered on a :class:`~varmq.App`, enqueued by
name with JSON arguments and run by an ordinary varmq worker (docs/tasks.md)."""
