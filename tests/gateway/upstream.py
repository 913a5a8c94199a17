"""A FastMCP tool server for the gateway test: one server, "vendor", with a
tool that can be made slow, one that reports errors, a write, and a count
of every call it received (so the test can tell what reached it).

Usage: upstream.py PORT STATE_DIR
  STATE_DIR/slow  exists -> slow_lookup sleeps 5 s
  STATE_DIR/stall exists -> charge applies the write, then sleeps 5 s
"""

import asyncio
import json
import os
import sys
import threading
from collections import Counter

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError

port, state = int(sys.argv[1]), sys.argv[2]
server = FastMCP("vendor")
calls = Counter()
charges = []
lock = threading.Lock()


def count(tool):
    with lock:
        calls[tool] += 1


READ = {"readOnlyHint": True, "openWorldHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}


@server.tool(annotations=READ)
async def lookup(city: str) -> str:
    """Looks a city's tax rate up."""
    count("lookup")
    return f"{city}: 8.25%"


@server.tool(annotations=READ)
async def slow_lookup(city: str) -> str:
    """Like lookup, but slow while STATE_DIR/slow exists."""
    count("slow_lookup")
    if os.path.exists(os.path.join(state, "slow")):
        await asyncio.sleep(5)
    return f"{city}: 8.25%"


@server.tool(annotations=READ)
async def flaky(city: str) -> str:
    """Always reports an error result (isError: true)."""
    count("flaky")
    raise ToolError("the rate table is missing")


@server.tool(annotations=WRITE)
async def charge(account: str, cents: int) -> str:
    """Charges an account; stalls after applying while STATE_DIR/stall exists."""
    count("charge")
    with lock:
        charges.append({"account": account, "cents": cents})
        n = len(charges)
    if os.path.exists(os.path.join(state, "stall")):
        await asyncio.sleep(5)
    return f"charge {n}: {cents} cents to {account}"


@server.tool(annotations={"readOnlyHint": True})
async def stats() -> str:
    """What reached this server: calls per tool and the charges applied."""
    with lock:
        return json.dumps({"calls": dict(calls), "charges": list(charges)})


if __name__ == "__main__":
    server.run(transport="http", host="127.0.0.1", port=port, path="/mcp", show_banner=False, log_level="warning")
