#!/usr/bin/env python3
"""`fusebox gateway` with real MCP peers: a 3-node cluster, three gateways
(three replicas of one agent fleet) in front of one FastMCP upstream
(upstream.py), and agents that are the official MCP Python SDK's client.

Each gateway has two upstreams: "vendor" over Streamable HTTP (shared by
the three) and "vendor2", a stdio child of each gateway.

What it shows:
1. the gateway passes tools/list through and a tool call answers as the
   upstream does; progress notifications reach the agent;
2. a tool that turns slow times out through the gateway (the timeout
   result names the layer) and the upstream sees each call cancelled;
   after the policy's threshold every gateway refuses it with an isError
   result, without calling the upstream, while the server's other tools
   keep answering;
3. an upstream result with isError counts toward tripping: after the
   threshold the gateways refuse that tool too; arguments that do not fit
   the tool's inputSchema are refused at the gateway and never count;
4. a non-idempotent write called twice under one intent id (through two
   gateways) runs once, and the second call replays the first's result;
   the write kill switch refuses writes with a clear result;
5. a write whose answer is lost (the upstream applies it, then stalls past
   the deadline) becomes ambiguous: the agent is told the outcome is
   unknown, retries through the other gateways never reach the upstream,
   `fusebox ledger` lists the key as ambiguous, and once an operator
   resolves it a retry replays the resolution;
6. in HALF_OPEN, with the three gateways' agents racing, exactly
   concurrent_probes calls reach the upstream;
7. the aggregated endpoint (/mcp) merges both upstreams, prefixing only
   the names they share, and routes calls by name; an agent that launches
   `fusebox gateway --stdio` as a command gets the same;
8. an upstream that restarts is reconnected, and a stdio upstream whose
   process dies is started again; /metrics counts what happened;
9. with the cluster stopped the gateways say degraded and follow
   on_partition: fail_open_local tools answer (marked degraded in _meta),
   fail_closed tools are refused.

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
import urllib.request

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
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

[servers.vendor.tools.find_customer.breaker]
consecutive_failures = 3
open_ms = 60000

# Its words overrule its answers' form.
[servers.vendor.tools.find_customer.classify]
success = ["no such customer"]
caller_error = ["invalid customer id"]
failure = ["temporarily unavailable"]

[servers.vendor.tools.charge]
timeout_ms = 1000

# The jobs server runs its tools as MCP tasks: the deadline is each poll's.
[servers.jobs]
timeout_ms = 2000

[servers.jobs.breaker]
minimum_calls = 1000

[servers.jobs.tools.export_archive.breaker]
consecutive_failures = 2
open_ms = 60000

[servers.vendor.tools.strict]
on_partition = "fail_closed"

[servers.vendor.tools.strict.breaker]
consecutive_failures = 3
open_ms = 60000

[servers.vendor.tools.probed]
timeout_ms = 5000

[servers.vendor.tools.probed.breaker]
consecutive_failures = 2
open_ms = 3000
open_backoff_multiplier = 1
concurrent_probes = 2
probe_successes = 2
"""
CONCURRENT_PROBES = 2
# Each call's budget at the gateways: it bounds a whole MCP task.
BUDGET_MS = 10000
TASKS_PYTHON = os.environ.get("FUSEBOX_TASKS_PYTHON", sys.executable)


class Failed(Exception):
    pass


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_ports(n):
    """`n` distinct free loopback ports. All are bound at once, so no two
    are the same: ports taken one by one, each released before the next,
    can repeat (a node and a gateway once got the same one)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


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
        ports = free_ports(8)
        self.api = ports[0:3]
        self.endpoints = ",".join(f"127.0.0.1:{p}" for p in self.api)
        self.state = os.path.join(tmp, "upstream")
        os.makedirs(self.state)
        self.state2 = os.path.join(tmp, "upstream2")
        os.makedirs(self.state2)
        self.upstream_port = ports[3]
        self.jobs_port = ports[4]
        self.jobs_state = os.path.join(tmp, "jobs")
        os.makedirs(self.jobs_state)
        self.gateway_ports = ports[5:8]

    def spawn(self, name, args, env=None):
        out = open(os.path.join(self.tmp, f"{name}.log"), "a")
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
        # Right after the election a member may not know the leader yet.
        deadline = time.monotonic() + 30
        while True:
            try:
                self.cli("policy", "apply", policy, "--ns", NS, "--reason", "gateway test")
                break
            except Failed as e:
                if "leader" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.start_upstream()
        for i, port in enumerate(self.gateway_ports):
            config = self.gateway_config(f"gateway-{i + 1}", port)
            self.spawn(f"gateway-{i + 1}", [self.binary, "gateway", "--config", config])
        for i, port in enumerate(self.gateway_ports):
            wait_port(port, f"gateway {i + 1}", timeout=90)

    def start_upstream(self):
        self.upstream = self.spawn("upstream", [sys.executable, os.path.join(HERE, "upstream.py"),
                                                str(self.upstream_port), self.state])
        wait_port(self.upstream_port, "the upstream")
        if not getattr(self, "jobs", None):
            # fastmcp-tasks pins its own FastMCP, so it has a venv of its own.
            self.jobs = self.spawn("jobs", [TASKS_PYTHON, os.path.join(HERE, "task_upstream.py"),
                                            str(self.jobs_port), self.jobs_state])
            wait_port(self.jobs_port, "the task upstream")

    def gateway_config(self, name, port):
        """A gateway's file; without a port it serves stdio only."""
        config = os.path.join(self.tmp, f"{name}.toml")
        listen = f'listen = "127.0.0.1:{port}"' if port else ""
        with open(config, "w") as f:
            f.write(f"""
{listen}
namespace = "{NS}"
replica_id = "{name}"
cluster = [{", ".join(f'"127.0.0.1:{p}"' for p in self.api)}]
budget_ms = {BUDGET_MS}

[[upstream]]
name = "vendor"
url = "http://127.0.0.1:{self.upstream_port}/mcp"

[[upstream]]
name = "vendor2"
command = ["{sys.executable}", "{os.path.join(HERE, "upstream.py")}", "stdio", "{self.state2}"]

[[upstream]]
name = "jobs"
url = "http://127.0.0.1:{self.jobs_port}/mcp"
""")
        return config

    def stop_cluster(self):
        for name, proc in self.procs:
            if name.startswith("node-") and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)

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


async def session_call(url, tool, args, meta=None, progress=None):
    async with streamable_http_client(url, terminate_on_close=False) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            if tool is None:
                return await session.list_tools()
            return await session.call_tool(tool, args, meta=meta, progress_callback=progress)


def http_get(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def metric(text, line_start):
    """The value of the first series starting with line_start, else 0."""
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Agents:
    """The fleet's agents, one per gateway, and a direct line upstream."""

    def __init__(self, world):
        self.urls = [f"http://127.0.0.1:{p}/servers/vendor/mcp" for p in world.gateway_ports]
        self.aggregated = [f"http://127.0.0.1:{p}/mcp" for p in world.gateway_ports]
        self.base = [f"http://127.0.0.1:{p}" for p in world.gateway_ports]
        self.direct = f"http://127.0.0.1:{world.upstream_port}/mcp"
        self.jobs = [f"http://127.0.0.1:{p}/servers/jobs/mcp" for p in world.gateway_ports]
        self.jobs_direct = f"http://127.0.0.1:{world.jobs_port}/mcp"

    async def job(self, i, tool, args, intent=None):
        meta = {INTENT: intent} if intent else None
        return await session_call(self.jobs[i % 3], tool, args, meta)

    async def job_stats(self):
        return json.loads(text(await session_call(self.jobs_direct, "job_stats", {})))

    async def call(self, i, tool, args, intent=None):
        meta = {INTENT: intent} if intent else None
        return await session_call(self.urls[i % 3], tool, args, meta)

    async def upstream_stats(self):
        return json.loads(text(await session_call(self.direct, "stats", {})))

    async def calls(self, tool):
        return (await self.upstream_stats())["calls"].get(tool, 0)

    async def cancelled(self, tool):
        return (await self.upstream_stats())["cancelled"].get(tool, 0)


async def scenario(world):
    agents = Agents(world)

    listed = await session_call(agents.urls[0], None, None)
    direct = await session_call(agents.direct, None, None)
    if sorted(t.name for t in listed.tools) != sorted(t.name for t in direct.tools):
        raise Failed(f"tools/list differs: {[t.name for t in listed.tools]}")
    answer = await agents.call(0, "lookup", {"city": "Austin"})
    if failed(answer) or "8.25%" not in text(answer):
        raise Failed(f"lookup through the gateway: {answer}")
    steps = []

    async def progressed(progress, total, message):
        steps.append((progress, total, message))

    done = await session_call(agents.urls[1], "progressing", {"steps": 3}, progress=progressed)
    if failed(done) or [s[0] for s in steps] != [1, 2, 3] or steps[-1][2] != "step 3 of 3":
        raise Failed(f"progress did not reach the agent: {steps} / {text(done)}")
    log(f"1. tools/list passes through ({len(listed.tools)} tools); lookup answers '{text(answer)}'; "
        f"the agent saw progress {[s[0] for s in steps]}")

    open(os.path.join(world.state, "slow"), "w").close()
    seen = []
    for i in range(3):
        r = await agents.call(i, "slow_lookup", {"city": "Austin"})
        seen.append(text(r))
        if not failed(r):
            raise Failed(f"a slow call was not cut off: {text(r)}")
    reached = await agents.calls("slow_lookup")
    deadline = time.monotonic() + 5
    while await agents.cancelled("slow_lookup") < reached and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    cancelled = await agents.cancelled("slow_lookup")
    if reached != 3 or cancelled != reached:
        raise Failed(f"{reached} slow calls reached the upstream and it saw {cancelled} cancelled")
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
        f"('{text(r)[:90]}', {took * 1000:.0f} ms) with {reached} calls upstream, all {cancelled} cancelled there; "
        f"lookup still answers")

    for i in range(3):
        r = await agents.call(i, "flaky", {"city": "Austin"})
        if not failed(r) or "rate table" not in text(r):
            raise Failed(f"the upstream's isError result was not passed on: {text(r)}")
    await asyncio.sleep(1.5)
    r = await agents.call(0, "flaky", {"city": "Austin"})
    if "unavailable" not in text(r) or await agents.calls("flaky") != 3:
        raise Failed(f"isError results did not trip the breaker: {text(r)}")
    for i in range(6):
        r = await agents.call(i, "strict", {"cents": "twelve"})
        if not failed(r) or "Invalid arguments for strict" not in text(r):
            raise Failed(f"arguments off the schema were not refused at the gateway: {text(r)}")
    await asyncio.sleep(1.5)
    fine = await agents.call(0, "strict", {"cents": 12})
    if failed(fine) or await agents.calls("strict") != 1:
        raise Failed(f"invalid arguments counted against the tool: {text(fine)}")
    log("3. three isError results tripped flaky's breaker; the fourth call was refused at the gateway. "
        f"Six calls with bad arguments were refused at the gateway ('{text(r)[:100]}'), never sent, "
        "and the tool (breaker at 3) still answers")

    for i in range(6):
        absent = await agents.call(i, "find_customer", {"customer": str(100 + i)})
        mistake = await agents.call(i, "find_customer", {"customer": "x-1"})
        if not failed(absent) or "No such customer" not in text(absent):
            raise Failed(f"the upstream's 'no such customer' was not passed on: {text(absent)}")
        if not failed(mistake) or "invalid customer id" not in text(mistake):
            raise Failed(f"the upstream's 'invalid customer id' was not passed on: {text(mistake)}")
    await asyncio.sleep(1.5)
    found = await agents.call(0, "find_customer", {"customer": "42"})
    if failed(found) or await agents.calls("find_customer") != 13:
        raise Failed(f"error answers the policy calls success or the caller's were counted: {text(found)}")
    for i in range(3):
        down = await agents.call(i, "find_customer", {"customer": "down"})
        if "temporarily unavailable" not in text(down):
            raise Failed(f"the upstream's plain answer was not passed on: {text(down)}")
    await asyncio.sleep(1.5)
    r = await agents.call(1, "find_customer", {"customer": "42"})
    if "unavailable for about" not in text(r) or await agents.calls("find_customer") != 16:
        raise Failed(f"plain answers the policy calls failures did not trip the breaker: {text(r)}")
    log("3b. find_customer's policy patterns: 6 'no such customer' and 6 'invalid customer id' "
        "error results counted nothing (breaker at 3, still answering); 3 plain 'temporarily "
        f"unavailable' answers tripped it ('{text(r)[:80]}')")

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

    world.cli("killswitch", "writes", "on", "--ns", NS, "--reason", "card processor incident")
    await asyncio.sleep(1.5)
    blocked = await agents.call(1, "charge", {"account": "acme", "cents": 900}, intent="order-3")
    read = await agents.call(1, "lookup", {"city": "Oslo"})
    world.cli("killswitch", "writes", "off", "--ns", NS, "--reason", "incident over")
    charges = (await agents.upstream_stats())["charges"]
    if not failed(blocked) or "writes are blocked" not in text(blocked) or failed(read) or len(charges) != 2:
        raise Failed(f"the kill switch: {text(blocked)} / {text(read)} / {charges}")
    log(f"   kill switch on: the write is refused ('{text(blocked)[:100]}'), reads still answer")

    await tasks(agents, world)
    await half_open_race(agents, world)
    await aggregated(agents, world)
    await reconnect_and_metrics(agents, world)
    await partition(agents, world)


async def tasks(agents, world):
    started = time.monotonic()
    report = await agents.job(0, "build_report", {"pages": 3})
    took = time.monotonic() - started
    if failed(report) or text(report) != "a report of 3 pages" or took < 1.0:
        raise Failed(f"a task's result did not come back as the call's: {text(report)} ({took:.2f} s)")
    for i in range(2):
        locked = await agents.job(i, "export_archive", {"year": 1999})
        if not failed(locked) or "locked" not in text(locked):
            raise Failed(f"a task that ended in an error result: {text(locked)}")
    await asyncio.sleep(1.5)
    refused = await agents.job(2, "export_archive", {"year": 1999})
    stats = await agents.job_stats()
    if "unavailable for about" not in text(refused) or stats["calls"].get("export_archive") != 2:
        raise Failed(f"tasks ending in errors did not trip the breaker: {text(refused)} / {stats}")
    log(f"10. MCP tasks are followed for the agent: build_report answered '{text(report)}' after {took:.1f} s; "
        f"two export_archive tasks ending in isError tripped its breaker ('{text(refused)[:60]}')")

    done = await agents.job(0, "provision", {"account": "acme"}, intent="acct-1")
    again = await agents.job(1, "provision", {"account": "acme"}, intent="acct-1")
    stats = await agents.job_stats()
    if failed(done) or text(again) != text(done) or stats["provisioned"] != ["acme"]:
        raise Failed(f"a write run as a task ran again: {text(done)} / {text(again)} / {stats}")
    open(os.path.join(world.jobs_state, "stall"), "w").close()
    started = time.monotonic()
    lost = await agents.job(1, "provision", {"account": "zeta"}, intent="acct-2")
    took = time.monotonic() - started
    retry = await agents.job(2, "provision", {"account": "zeta"}, intent="acct-2")
    os.remove(os.path.join(world.jobs_state, "stall"))
    await asyncio.sleep(1.0)  # tasks/cancel reaches the task
    stats = await agents.job_stats()
    if "may or may not have happened" not in text(lost) or not failed(retry) \
            or stats["provisioned"] != ["acme", "zeta"] or stats["cancelled"].get("provision") != 1:
        raise Failed(f"a task outliving its budget: {text(lost)} / {text(retry)} / {stats}")
    records = json.loads(world.cli("ledger", "list", "--ns", NS, "--status", "ambiguous", "--json"))
    keys = [r["key"] for r in records.get("records", records if isinstance(records, list) else [])]
    if len(keys) != 1:
        raise Failed(f"expected the stalled task's key ambiguous, the ledger lists {records}")
    log(f"    provision (a write) as a task ran once for two calls of one intent ('{text(done)}'); "
        f"a task outliving the {BUDGET_MS} ms budget was cancelled upstream after {took:.1f} s and "
        f"left key {keys[0]} ambiguous ('{text(lost)[:80]}'); the retry was refused")


async def half_open_race(agents, world):
    failing = os.path.join(world.state, "failing")
    open(failing, "w").close()
    for i in range(3):
        await agents.call(i, "probed", {"city": "Austin"})
    await asyncio.sleep(1.0)
    r = await agents.call(0, "probed", {"city": "Austin"})
    if "unavailable" not in text(r):
        raise Failed(f"probed did not trip: {text(r)}")
    os.remove(failing)
    await asyncio.sleep(3.5)  # open_ms (3 s) passes: the breaker is half-open
    before = await agents.calls("probed")
    racing = [agents.call(i, "probed", {"city": f"c{i}"}) for i in range(12)]
    results = await asyncio.gather(*racing)
    reached = await agents.calls("probed") - before
    answered = sum(1 for r in results if not failed(r))
    refused = sum(1 for r in results if failed(r) and "unavailable" in text(r))
    if reached != CONCURRENT_PROBES or answered != CONCURRENT_PROBES or refused != 12 - CONCURRENT_PROBES:
        raise Failed(f"half-open race: {reached} calls reached the upstream, {answered} answered, "
                     f"{refused} refused (concurrent_probes = {CONCURRENT_PROBES})")
    log(f"6. half-open, 12 racing calls through 3 gateways: {reached} reached the upstream "
        f"(concurrent_probes = {CONCURRENT_PROBES}), {refused} were refused")


async def aggregated(agents, world):
    listed = await session_call(agents.aggregated[0], None, None)
    names = sorted(t.name for t in listed.tools)
    for expected in ("vendor__lookup", "vendor2__lookup", "whoami"):
        if expected not in names:
            raise Failed(f"the aggregated tools/list lacks {expected}: {names}")
    if "lookup" in names or "vendor2__whoami" in names:
        raise Failed(f"the aggregated list prefixed the wrong names: {names}")
    via2 = await session_call(agents.aggregated[1], "vendor2__lookup", {"city": "Oslo"})
    via1 = await session_call(agents.aggregated[1], "vendor__lookup", {"city": "Oslo"})
    if "(stdio)" not in text(via2) or "(stdio)" in text(via1):
        raise Failed(f"calls were routed to the wrong upstream: {text(via2)} / {text(via1)}")
    config = world.gateway_config("gateway-stdio", None)
    quiet = dict(os.environ, RUST_LOG="warn")  # its log goes to our stderr
    params = StdioServerParameters(command=world.binary, args=["gateway", "--config", config, "--stdio"], env=quiet)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = sorted(t.name for t in (await session.list_tools()).tools)
            whoami = await session.call_tool("whoami", {})
            refused = await session.call_tool("vendor__slow_lookup", {"city": "Austin"})
    if tools != names or failed(whoami) or "unavailable" not in text(refused):
        raise Failed(f"the stdio gateway: {tools} / {text(whoami)} / {text(refused)}")
    log(f"7. /mcp merges {len(names)} tools from both upstreams (shared names prefixed, 'whoami' not) and routes "
        f"by name ('{text(via2)}'); an agent on stdio sees the same list and the fleet's open breaker "
        f"('{text(refused)[:70]}')")


async def reconnect_and_metrics(agents, world):
    world.upstream.send_signal(signal.SIGKILL)
    world.upstream.wait(timeout=30)
    down = await agents.call(0, "lookup", {"city": "Reno"})
    if not failed(down):
        raise Failed(f"a call to a dead upstream answered: {text(down)}")
    world.start_upstream()
    await asyncio.sleep(1.5)  # past the gateway's pause between reconnects
    back = await agents.call(0, "lookup", {"city": "Reno"})
    if failed(back):
        raise Failed(f"the gateway did not reconnect to the restarted upstream: {text(back)}")
    before = text(await session_call(agents.aggregated[0], "whoami", {}))
    # Every gateway's stdio child of this run (the state directory is ours).
    subprocess.run(["pkill", "-9", "-f", f"upstream.py stdio {world.state2}"], check=False)
    deadline = time.monotonic() + 10
    while True:
        after = await session_call(agents.aggregated[0], "whoami", {})
        if not failed(after):
            break
        if time.monotonic() > deadline:
            raise Failed(f"the gateway did not restart its stdio upstream: {text(after)}")
        await asyncio.sleep(0.5)
    if text(after) == before:
        raise Failed(f"whoami answered from the killed process: {text(after)}")
    metrics = http_get(agents.base[0] + "/metrics")
    checks = {
        'fusebox_gateway_rejects_total{server="vendor",tool="slow_lookup"}': lambda v: v >= 1,
        'fusebox_gateway_calls_total{server="vendor",tool="strict",kind="invalid_arguments"}': lambda v: v >= 1,
        'fusebox_gateway_ledger_answers_total{server="vendor",tool="charge",kind="performed"}': lambda v: v >= 1,
        'fusebox_gateway_added_latency_seconds_count': lambda v: v >= 10,
        'fusebox_gateway_view_fresh': lambda v: v == 1,
    }
    for series, ok in checks.items():
        if not ok(metric(metrics, series + " ")):
            raise Failed(f"/metrics: {series} = {metric(metrics, series + ' ')}")
    counted = metric(metrics, "fusebox_gateway_added_latency_seconds_count ")
    refusals = metric(metrics, 'fusebox_gateway_rejects_total{server="vendor",tool="slow_lookup"} ')
    log(f"8. the upstream was killed ('{text(down)[:80]}') and restarted: the gateway reconnected and "
        f"'{text(back)}'. The stdio upstream was killed ('{before}') and started again ('{text(after)}'). "
        f"/metrics counts {counted:.0f} calls, {refusals:.0f} refusals of slow_lookup")


async def partition(agents, world):
    world.stop_cluster()
    deadline = time.monotonic() + 40
    while True:
        health = json.loads(http_get(agents.base[2] + "/healthz"))
        if health["status"] == "degraded":
            break
        if time.monotonic() > deadline:
            raise Failed(f"the gateway did not say degraded with the cluster stopped: {health}")
        await asyncio.sleep(0.5)
    opened = await agents.call(2, "lookup", {"city": "Lima"})
    meta = getattr(opened, "meta", None) or {}
    closed = await agents.call(2, "strict", {"cents": 5})
    if failed(opened) or meta.get("fusebox/degraded") is not True:
        raise Failed(f"fail_open_local: {text(opened)} (meta {meta})")
    if not failed(closed) or "fails closed" not in text(closed):
        raise Failed(f"fail_closed: {text(closed)}")
    log(f"9. cluster stopped: /healthz says '{health['detail'][:70]}'; lookup (fail_open_local) answers "
        f"with _meta fusebox/degraded = true; strict is refused: '{text(closed)[:90]}'")


def main():
    binary = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="fusebox-gateway-")
    world = World(binary, tmp)
    ok = False
    try:
        world.start()
        asyncio.run(asyncio.wait_for(scenario(world), timeout=420))
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
