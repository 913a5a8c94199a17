#!/usr/bin/env python3
"""`fusebox gateway` with real MCP peers: a 3-node cluster, three gateways
(three replicas of one agent fleet) in front of one FastMCP upstream
(upstream.py), and agents that are the official MCP Python SDK's client.

What it shows:
1. the gateway passes tools/list through and a tool call answers as the
   upstream does;
2. a tool that turns slow times out through the gateway (the timeout
   result names the layer), and after the policy's threshold every gateway
   refuses it with an isError result, without calling the upstream, while
   the server's other tools keep answering;
3. an upstream result with isError counts toward tripping: after the
   threshold the gateways refuse that tool too;
4. a non-idempotent write called twice under one intent id (through two
   gateways) runs once, and the second call replays the first's result;
5. a write whose answer is lost (the upstream applies it, then stalls past
   the deadline) becomes ambiguous: the agent is told the outcome is
   unknown, retries through the other gateways never reach the upstream,
   `fusebox ledger` lists the key as ambiguous, and once an operator
   resolves it a retry replays the resolution.

Usage: test_gateway.py FUSEBOX_BINARY   (the venv with fastmcp and mcp runs it)
"""

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

HERE = os.path.dirname(os.path.abspath(__file__))
NS = "gw"
INTENT = "fusebox/intentId"
POLICY = """
[defaults]
timeout_ms = 2000

[defaults.retry]
max_attempts = 1

# The server breaker trips only on a dead server here, so one tool's
# failures do not close the server's other tools.
[servers.vendor.breaker]
minimum_calls = 1000

[servers.vendor.tools.slow_lookup]
timeout_ms = 300

[servers.vendor.tools.slow_lookup.breaker]
consecutive_failures = 3
open_ms = 60000

[servers.vendor.tools.flaky.breaker]
consecutive_failures = 3
open_ms = 60000

[servers.vendor.tools.charge]
timeout_ms = 1000
"""


class Failed(Exception):
    pass


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise Failed(f"{what} did not listen on {port} within {timeout} s")


def failed(result):
    """Whether a tools/call result has isError set."""
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


def text(result):
    return " ".join(getattr(c, "text", "") for c in result.content)


class World:
    """The processes of the test, stopped at the end whatever happens."""

    def __init__(self, binary, tmp):
        self.binary, self.tmp = binary, tmp
        self.procs = []
        self.api = [free_port() for _ in range(3)]
        self.endpoints = ",".join(f"127.0.0.1:{p}" for p in self.api)
        self.state = os.path.join(tmp, "upstream")
        os.makedirs(self.state)
        self.upstream_port = free_port()
        self.gateway_ports = [free_port() for _ in range(3)]

    def spawn(self, name, args, env=None):
        out = open(os.path.join(self.tmp, f"{name}.log"), "w")
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.procs.append((name, proc))
        return proc

    def cli(self, *args, check=True):
        done = subprocess.run(
            [self.binary, *args, "--endpoints", self.endpoints, "--actor", "gateway-test"],
            capture_output=True, text=True, timeout=60,
        )
        if check and done.returncode != 0:
            raise Failed(f"fusebox {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self):
        peers = ",".join(f"{i + 1}=127.0.0.1:{p}" for i, p in enumerate(self.api))
        for i, port in enumerate(self.api):
            self.spawn(f"node-{i + 1}", [
                self.binary, "serve", "--id", str(i + 1), "--listen", f"127.0.0.1:{port}",
                "--peers", peers, "--data", os.path.join(self.tmp, f"data-{i + 1}"),
            ])
        deadline = time.monotonic() + 60
        while True:
            status = subprocess.run([self.binary, "cluster", "status", "--json", "--endpoints", self.endpoints],
                                    capture_output=True, text=True, timeout=30)
            if status.returncode == 0 and json.loads(status.stdout).get("leader_id"):
                break
            if time.monotonic() > deadline:
                raise Failed("the cluster elected no leader within 60 s")
            time.sleep(0.3)
        policy = os.path.join(self.tmp, "policy.toml")
        with open(policy, "w") as f:
            f.write(POLICY)
        self.cli("policy", "apply", policy, "--ns", NS, "--reason", "gateway test")
        self.spawn("upstream", [sys.executable, os.path.join(HERE, "upstream.py"), str(self.upstream_port), self.state])
        wait_port(self.upstream_port, "the upstream")
        for i, port in enumerate(self.gateway_ports):
            config = os.path.join(self.tmp, f"gateway-{i + 1}.toml")
            with open(config, "w") as f:
                f.write(f"""
listen = "127.0.0.1:{port}"
namespace = "{NS}"
replica_id = "gateway-{i + 1}"
cluster = [{", ".join(f'"127.0.0.1:{p}"' for p in self.api)}]

[[upstream]]
name = "vendor"
url = "http://127.0.0.1:{self.upstream_port}/mcp"
""")
            self.spawn(f"gateway-{i + 1}", [self.binary, "gateway", "--config", config])
        for i, port in enumerate(self.gateway_ports):
            wait_port(port, f"gateway {i + 1}", timeout=90)

    def stop(self):
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for _, proc in self.procs:
            proc.wait(timeout=30)

    def logs(self):
        for name, _ in self.procs:
            with open(os.path.join(self.tmp, f"{name}.log")) as f:
                lines = f.read().splitlines()[-15:]
            print(f"--- {name}:\n" + "\n".join(lines))


async def session_call(url, tool, args, meta=None):
    async with streamable_http_client(url, terminate_on_close=False) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            if tool is None:
                return await session.list_tools()
            return await session.call_tool(tool, args, meta=meta)


class Agents:
    """The fleet's agents, one per gateway, and a direct line upstream."""

    def __init__(self, world):
        self.urls = [f"http://127.0.0.1:{p}/servers/vendor/mcp" for p in world.gateway_ports]
        self.direct = f"http://127.0.0.1:{world.upstream_port}/mcp"

    async def call(self, i, tool, args, intent=None):
        meta = {INTENT: intent} if intent else None
        return await session_call(self.urls[i % 3], tool, args, meta)

    async def upstream_stats(self):
        return json.loads(text(await session_call(self.direct, "stats", {})))

    async def calls(self, tool):
        return (await self.upstream_stats())["calls"].get(tool, 0)


async def scenario(world):
    agents = Agents(world)

    listed = await session_call(agents.urls[0], None, None)
    direct = await session_call(agents.direct, None, None)
    if sorted(t.name for t in listed.tools) != sorted(t.name for t in direct.tools):
        raise Failed(f"tools/list differs: {[t.name for t in listed.tools]}")
    answer = await agents.call(0, "lookup", {"city": "Austin"})
    if failed(answer) or "8.25%" not in text(answer):
        raise Failed(f"lookup through the gateway: {answer}")
    log(f"1. tools/list passes through ({len(listed.tools)} tools); lookup answers '{text(answer)}'")

    open(os.path.join(world.state, "slow"), "w").close()
    seen = []
    for i in range(3):
        r = await agents.call(i, "slow_lookup", {"city": "Austin"})
        seen.append(text(r))
        if not failed(r):
            raise Failed(f"a slow call was not cut off: {text(r)}")
    reached = await agents.calls("slow_lookup")
    await asyncio.sleep(1.5)  # the trip reaches every gateway's view
    for i in range(6):
        started = time.monotonic()
        r = await agents.call(i, "slow_lookup", {"city": "Austin"})
        took = time.monotonic() - started
        if not failed(r) or "unavailable" not in text(r):
            raise Failed(f"gateway {i % 3 + 1} did not refuse the tripped tool: {text(r)}")
    if await agents.calls("slow_lookup") != reached:
        raise Failed("a refused call reached the upstream")
    fine = await agents.call(1, "lookup", {"city": "Reno"})
    if failed(fine):
        raise Failed(f"the server's other tool was refused too: {text(fine)}")
    log(f"2. slow_lookup timed out ('{seen[0][:90]}'), then every gateway refused it "
        f"('{text(r)[:90]}', {took * 1000:.0f} ms) with {reached} calls upstream; lookup still answers")

    for i in range(3):
        r = await agents.call(i, "flaky", {"city": "Austin"})
        if not failed(r) or "rate table" not in text(r):
            raise Failed(f"the upstream's isError result was not passed on: {text(r)}")
    await asyncio.sleep(1.5)
    r = await agents.call(0, "flaky", {"city": "Austin"})
    if "unavailable" not in text(r) or await agents.calls("flaky") != 3:
        raise Failed(f"isError results did not trip the breaker: {text(r)}")
    log("3. three isError results tripped flaky's breaker; the fourth call was refused at the gateway")

    first = await agents.call(0, "charge", {"account": "acme", "cents": 1200}, intent="order-1")
    again = await agents.call(1, "charge", {"cents": 1200, "account": "acme"}, intent="order-1")
    charges = (await agents.upstream_stats())["charges"]
    if failed(first) or text(again) != text(first) or len(charges) != 1:
        raise Failed(f"a repeated write ran again: {text(first)} / {text(again)} / {charges}")
    log(f"4. one intent, two gateways: the charge ran once ('{text(first)}'), the second call replayed it")

    open(os.path.join(world.state, "stall"), "w").close()
    lost = await agents.call(0, "charge", {"account": "acme", "cents": 500}, intent="order-2")
    if not failed(lost):
        raise Failed(f"a write whose answer was lost was reported done: {text(lost)}")
    for i in (1, 2):
        retry = await agents.call(i, "charge", {"account": "acme", "cents": 500}, intent="order-2")
        if not failed(retry):
            raise Failed(f"a retry of an ambiguous write was not refused: {text(retry)}")
    charges = (await agents.upstream_stats())["charges"]
    if len(charges) != 2:
        raise Failed(f"the ambiguous write ran {len(charges) - 1} times: {charges}")
    records = json.loads(world.cli("ledger", "list", "--ns", NS, "--status", "ambiguous", "--json"))
    keys = [r["key"] for r in records.get("records", records if isinstance(records, list) else [])]
    if len(keys) != 1:
        raise Failed(f"expected one ambiguous key, the ledger lists {records}")
    log(f"5. the lost answer left key {keys[0]} ambiguous ('{text(lost)[:120]}'); retries through two other gateways never reached the upstream")
    os.remove(os.path.join(world.state, "stall"))
    world.cli("ledger", "resolve", NS, keys[0], "--decision", "done", "--operation-id", "op-77",
              "--note", "found in the provider console")
    replay = await agents.call(2, "charge", {"account": "acme", "cents": 500}, intent="order-2")
    charges = (await agents.upstream_stats())["charges"]
    if "already happened (operation op-77)" not in text(replay) or len(charges) != 2:
        raise Failed(f"after the resolution the retry did not replay: {text(replay)} / {charges}")
    log(f"   resolved as done: the retry replays ('{text(replay)[:100]}'), the charge still ran once")


def main():
    binary = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="fusebox-gateway-")
    world = World(binary, tmp)
    ok = False
    try:
        world.start()
        asyncio.run(asyncio.wait_for(scenario(world), timeout=300))
        ok = True
    except BaseException as e:  # any failure: show the processes' last words
        log(f"FAILED: {e!r}")
        world.logs()
    finally:
        world.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    log("gateway test " + ("passed" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
