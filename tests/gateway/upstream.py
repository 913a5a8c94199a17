"""A FastMCP tool server for the gateway test: one server, "vendor", with a
tool that can be made slow, one that reports errors, one whose words say
more than its form, a write, a tool whose breaker the test sends to
HALF_OPEN, one that reports progress, and a count of every call it received
(so the test can tell what reached it).

Usage: upstream.py PORT STATE_DIR      (Streamable HTTP on 127.0.0.1:PORT/mcp)
       upstream.py stdio STATE_DIR     (MCP on stdin and stdout)
  STATE_DIR/slow    exists -> slow_lookup sleeps 5 s
  STATE_DIR/stall   exists -> charge applies the write, then sleeps 5 s
  STATE_DIR/failing exists -> probed reports an error result; otherwise it
                              answers after 2.5 s (so racing probes overlap)
"""

import asyncio
import json
import os
import sys
import threading
from collections import Counter

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError

where, state = sys.argv[1], sys.argv[2]
server = FastMCP("vendor")
calls = Counter()
cancelled = Counter()
charges = []
lock = threading.Lock()


def count(tool):
    with lock:
        calls[tool] += 1


def exists(name):
    return os.path.exists(os.path.join(state, name))


READ = {"readOnlyHint": True, "openWorldHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}


@server.tool(annotations=READ)
async def lookup(city: str) -> str:
    """Looks a city's tax rate up."""
    count("lookup")
    return f"{city}: 8.25% ({where})"


@server.tool(annotations=READ)
async def slow_lookup(city: str) -> str:
    """Like lookup, but slow while STATE_DIR/slow exists."""
    count("slow_lookup")
    try:
        if exists("slow"):
            await asyncio.sleep(5)
    except asyncio.CancelledError:
        # notifications/cancelled reached the server and stopped the call.
        with lock:
            cancelled["slow_lookup"] += 1
        raise
    return f"{city}: 8.25%"


@server.tool(annotations=READ)
async def flaky(city: str) -> str:
    """Always reports an error result (isError: true)."""
    count("flaky")
    raise ToolError("the rate table is missing")


@server.tool(annotations=READ)
async def find_customer(customer: str) -> str:
    """Says what its form does not: an unknown customer is an error result
    ("no such customer"), so is a malformed id ("invalid customer id"), and
    customer "down" answers a plain "temporarily unavailable"."""
    count("find_customer")
    if customer == "down":
        return "Service temporarily unavailable, try later"
    if not customer.isdigit():
        raise ToolError(f"invalid customer id {customer!r}")
    if customer != "42":
        raise ToolError(f"No such customer: {customer}")
    return "customer 42: Ada"


@server.tool(annotations=READ)
async def strict(cents: int) -> str:
    """Takes whole cents only; its arguments are validated before it runs."""
    count("strict")
    return f"{cents} cents"


@server.tool(annotations=READ)
async def probed(city: str) -> str:
    """Fails while STATE_DIR/failing exists, else answers after 2.5 s."""
    count("probed")
    if exists("failing"):
        raise ToolError("the rate service is down")
    await asyncio.sleep(2.5)
    return f"{city}: 8.25%"


@server.tool(annotations=READ)
async def progressing(steps: int, ctx: Context) -> str:
    """Reports progress at each of its steps."""
    count("progressing")
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
        await asyncio.sleep(0.05)
    return f"{steps} steps done"


@server.tool(annotations=WRITE)
async def charge(account: str, cents: int) -> str:
    """Charges an account; stalls after applying while STATE_DIR/stall exists."""
    count("charge")
    with lock:
        charges.append({"account": account, "cents": cents})
        n = len(charges)
    if exists("stall"):
        await asyncio.sleep(5)
    return f"charge {n}: {cents} cents to {account}"


if where == "stdio":
    @server.tool(annotations=READ)
    async def whoami() -> str:
        """Only the stdio server has this tool (its name collides with none)."""
        count("whoami")
        return f"the stdio vendor, process {os.getpid()}"


@server.tool(annotations={"readOnlyHint": True})
async def stats() -> str:
    """What reached this server: calls per tool, calls cancelled, charges."""
    with lock:
        return json.dumps({"calls": dict(calls), "cancelled": dict(cancelled), "charges": list(charges)})


if __name__ == "__main__":
    if where == "stdio":
        server.run(transport="stdio", show_banner=False, log_level="warning")
    else:
        server.run(transport="http", host="127.0.0.1", port=int(where), path="/mcp",
                   show_banner=False, log_level="warning")
