"""A FastMCP tool server whose tools run as MCP tasks (the SEP-2663 tasks
extension, from `fastmcp-tasks`): `tools/call` answers with a task handle,
and the caller polls `tasks/get` until the task ends.

Usage: task_upstream.py PORT STATE_DIR   (Streamable HTTP on 127.0.0.1:PORT/mcp)
  STATE_DIR/stall  exists -> provision applies the write, then never finishes
                              (until the task is cancelled)
"""

import asyncio
import json
import os
import sys
import threading
from collections import Counter
from datetime import timedelta

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

port, state = sys.argv[1], sys.argv[2]
server = FastMCP("jobs")
server.add_extension(TasksExtension(url="memory://"))
calls = Counter()
cancelled = Counter()
provisioned = []
lock = threading.Lock()

TASK = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=200))
READ = {"readOnlyHint": True, "openWorldHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}


def count(tool):
    with lock:
        calls[tool] += 1


@server.tool(annotations=READ, task=TASK)
async def build_report(pages: int) -> str:
    """Builds a report in about a second, as a task."""
    count("build_report")
    await asyncio.sleep(1.0)
    return f"a report of {pages} pages"


@server.tool(annotations=READ, task=TASK)
async def export_archive(year: int) -> str:
    """Always ends in an error result, as a task."""
    count("export_archive")
    await asyncio.sleep(0.3)
    raise ToolError(f"the archive of {year} is locked")


@server.tool(annotations=WRITE, task=TASK)
async def provision(account: str) -> str:
    """Provisions an account (a write) as a task; stalls after applying it
    while STATE_DIR/stall exists."""
    count("provision")
    with lock:
        provisioned.append(account)
        n = len(provisioned)
    try:
        if os.path.exists(os.path.join(state, "stall")):
            await asyncio.sleep(600)
        await asyncio.sleep(0.8)
    except asyncio.CancelledError:
        with lock:
            cancelled["provision"] += 1
        raise
    return f"provisioned {account} as #{n}"


@server.tool(annotations={"readOnlyHint": True})
async def job_stats() -> str:
    """What reached this server: calls per tool, tasks cancelled, writes applied."""
    with lock:
        return json.dumps({"calls": dict(calls), "cancelled": dict(cancelled), "provisioned": list(provisioned)})


if __name__ == "__main__":
    server.run(transport="http", host="127.0.0.1", port=int(port), path="/mcp",
               show_banner=False, log_level="warning")
