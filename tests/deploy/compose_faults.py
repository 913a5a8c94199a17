#!/usr/bin/env python3
"""The Compose cluster under faults, with a client container's load running.

Started from the shipped deploy/compose/docker-compose.yml, with the image
named by --image. While `fusebox bench soak` runs in a client container on
the cluster's network, this:

1. kills the leader's container (`docker kill`): a new leader must serve
   within 5 s; the killed node is started again and must catch up;
2. cuts the (new) leader off the network for 20 s: the cut-off node must
   refuse writes while a new majority serves, and catch up after the heal;
3. restarts the three nodes one at a time (a rolling restart), each back
   and caught up before the next;
4. kills a follower's process from outside (a crash, not `docker kill`):
   the restart policy must bring it back;
5. backs a follower up (stopped, its volume copied, started) and later
   restores it (stopped, volume wiped, the copy put back): it must catch
   up from its copy.

Then it stops the load; the soak checks that no acknowledged ledger record
was lost, that no key was answered `started` twice and that every node
lists the same breakers. The timings are printed: time to a new leader,
time to catch up, and writes refused during each fault.

Everything it starts is removed at the end, whatever happens.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPOSE_FILE = os.path.join(REPO, "deploy", "compose", "docker-compose.yml")
NODES = (1, 2, 3)
ENDPOINTS = ",".join(f"fusebox-{n}:7600" for n in NODES)
# A follower trusts a killed leader for its lease (the longest election
# timeout, 2 s), then campaigns within one more election timeout (<= 2 s);
# a round can fail (two candidates at once, each voting for itself, or a
# vote refused while the lease held on the voter), which costs another
# timeout (<= 2 s); the metrics page refreshes every 500 ms. Runs measured
# 3.4-3.8 s, and 5.7 s once (two rounds, seen in the nodes' logs).
NEW_LEADER_WITHIN_S = 8.0
CATCH_UP_WITHIN_S = 60.0
PARTITION_S = 20.0
SOAK_MAX_S = 900
SETTLE_S = 120
MAJORITY = 2


class Failed(Exception):
    """A check of the deploy test failed."""


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(args, check=True, timeout=120, env=None):
    """Runs a command and returns its stdout; a failure raises with stderr."""
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=env
    )
    if check and done.returncode != 0:
        said = (done.stdout.strip()[-2000:] + "\n" + done.stderr.strip()[-2000:]).strip()
        raise Failed(f"{' '.join(args)} exited {done.returncode}: {said}")
    return done.stdout


class Cluster:
    """The Compose project and the ways to reach its nodes."""

    def __init__(self, project, image, cli):
        self.project = project
        self.image = image
        self.cli = cli  # the fusebox binary on this host
        self.env = dict(os.environ, FUSEBOX_IMAGE=image, COMPOSE_PROJECT_NAME=project)
        self.network = f"{project}_default"

    def compose(self, *args, timeout=180):
        return run(
            ["docker-compose", "-f", COMPOSE_FILE, "-p", self.project, *args],
            timeout=timeout,
            env=self.env,
        )

    def container(self, node):
        return f"{self.project}_fusebox-{node}_1"

    def status(self, node):
        """Node `node`'s own view, over its published port or else from
        inside its container (a port mapping may not survive a network
        reconnect); None if it does not answer."""
        done = subprocess.run(
            [self.cli, "cluster", "status", "--json", "--endpoints", f"127.0.0.1:760{node}"],
            capture_output=True, text=True, timeout=20,
        )
        if done.returncode == 0:
            return json.loads(done.stdout)
        return self.status_inside(node)

    def status_inside(self, node):
        """Node `node`'s own view, asked from inside its container."""
        done = subprocess.run(
            ["docker", "exec", self.container(node), "fusebox", "cluster", "status",
             "--json", "--endpoints", "127.0.0.1:7600"],
            capture_output=True, text=True, timeout=20,
        )
        if done.returncode != 0:
            return None
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError:
            return None

    def leader_seen_by(self, node):
        """The leader node `node` names on its metrics page (published
        port, refreshed every 500 ms; quicker to ask than the CLI), or None."""
        try:
            url = f"http://127.0.0.1:768{node}/metrics"
            with urllib.request.urlopen(url, timeout=2) as answer:
                page = answer.read().decode()
        except OSError:
            return None
        for line in page.splitlines():
            if line.startswith("fusebox_raft_leader_id "):
                return int(float(line.split()[1])) or None
        return None

    def leader(self, among=NODES, timeout=30.0):
        """The leader a majority of nodes name, one of `among`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = [self.leader_seen_by(n) for n in NODES]
            for candidate in set(seen):
                if candidate in among and seen.count(candidate) >= MAJORITY:
                    return candidate
            time.sleep(0.05)
        raise Failed(f"no leader among nodes {among} within {timeout} s")

    def wait_caught_up(self, node, since, timeout=CATCH_UP_WITHIN_S):
        """Seconds from `since` until `node` has applied what the leader had
        committed when asked first."""
        others = [n for n in NODES if n != node]
        target = max((s or {}).get("commit_index", 0) for s in map(self.status, others))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.status(node)
            if s and s.get("applied_index", 0) >= target:
                return time.monotonic() - since, target
            time.sleep(0.2)
        raise Failed(f"node {node} did not apply index {target} within {timeout} s")

    def wait_healthy(self, node, timeout=90.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = run(["docker", "inspect", "-f", "{{.State.Health.Status}}", self.container(node)], check=False)
            if out.strip() == "healthy":
                return
            time.sleep(0.5)
        raise Failed(f"node {node} not healthy within {timeout} s")


class Timeline:
    """The soak's per-second counts, read back against fault windows."""

    def __init__(self, path):
        self.path = path

    def lines(self):
        try:
            with open(self.path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def failed_between(self, start_s, end_s):
        """Writes that failed between two wall-clock times (seconds)."""
        return sum(
            line["writes_failed"]
            for line in self.lines()
            if start_s * 1000 <= line["t_ms"] <= end_s * 1000 + 1000
        )

    def first_ok_after(self, start_s):
        """When writes were first acknowledged again after `start_s`."""
        for line in self.lines():
            if line["t_ms"] > start_s * 1000 and line["writes_ok"] > 0 and line["writes_failed"] == 0:
                return line["t_ms"] / 1000.0 - start_s
        return None


def kill_the_leader(cluster, timeline, report):
    old = cluster.leader()
    others = tuple(n for n in NODES if n != old)
    log(f"fault 1: docker kill the leader, node {old}")
    t0, wall0 = time.monotonic(), time.time()
    run(["docker", "kill", cluster.container(old)])
    new = cluster.leader(among=others, timeout=30.0)
    elected = time.monotonic() - t0
    log(f"node {new} leads {elected:.1f} s after the kill")
    if elected > NEW_LEADER_WITHIN_S:
        raise Failed(f"a new leader took {elected:.1f} s (at most {NEW_LEADER_WITHIN_S})")
    time.sleep(3)
    t1 = time.monotonic()
    run(["docker", "start", cluster.container(old)])
    caught, index = cluster.wait_caught_up(old, t1)
    log(f"node {old} restarted and applied index {index} {caught:.1f} s after its start")
    report["leader_kill"] = {
        "killed": old, "new_leader": new, "new_leader_s": round(elected, 2),
        "catch_up_s": round(caught, 2),
        "writes_failed": timeline.failed_between(wall0, time.time()),
    }


def cut_off_the_leader(cluster, timeline, report):
    node = cluster.leader()
    others = tuple(n for n in NODES if n != node)
    container = cluster.container(node)
    log(f"fault 2: node {node} (the leader) off the network for {PARTITION_S:.0f} s")
    t0, wall0 = time.monotonic(), time.time()
    run(["docker", "network", "disconnect", cluster.network, container])
    try:
        new = cluster.leader(among=others, timeout=30.0)
        elected = time.monotonic() - t0
        log(f"the majority elected node {new} {elected:.1f} s after the cut")
        # The cut-off node must not acknowledge a write.
        out = run(
            ["docker", "exec", container, "fusebox", "bench", "ledger", "--json",
             "--endpoints", "127.0.0.1:7600", "--clients", "2", "--seconds", "3",
             "--warmup-seconds", "0", "--namespace", "minority"],
            check=False, timeout=90,
        )
        minority = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        if minority.get("keys", 0) != 0:
            raise Failed(f"the cut-off node acknowledged writes: {minority}")
        log(f"the cut-off node acknowledged no write (its bench: {minority.get('failures', {})})")
        time.sleep(max(0.0, PARTITION_S - (time.monotonic() - t0)))
    finally:
        run(["docker", "network", "connect", "--alias", f"fusebox-{node}", cluster.network, container], check=False)
    t1 = time.monotonic()
    caught, index = cluster.wait_caught_up(node, t1)
    log(f"healed: node {node} applied index {index} {caught:.1f} s after the heal")
    report["partition"] = {
        "cut_off": node, "new_leader": new, "new_leader_s": round(elected, 2),
        "minority_writes_acknowledged": minority.get("keys", 0),
        "catch_up_s": round(caught, 2),
        "writes_failed": timeline.failed_between(wall0, time.time()),
    }


def rolling_restart(cluster, timeline, report):
    log("fault 3: rolling restart, one node at a time")
    steps = []
    for node in NODES:
        t0, wall0 = time.monotonic(), time.time()
        cluster.compose("restart", "-t", "20", f"fusebox-{node}")
        cluster.wait_healthy(node)
        caught, index = cluster.wait_caught_up(node, t0)
        log(f"node {node} restarted, healthy and at index {index} after {caught:.1f} s")
        steps.append({
            "node": node, "back_s": round(caught, 2),
            "writes_failed": timeline.failed_between(wall0, time.time()),
        })
    report["rolling_restart"] = steps


def crash_a_follower(cluster, timeline, report):
    leader = cluster.leader()
    node = next(n for n in NODES if n != leader)
    container = cluster.container(node)
    restarts = int(run(["docker", "inspect", "-f", "{{.RestartCount}}", container]).strip())
    pid = run(["docker", "inspect", "-f", "{{.State.Pid}}", container]).strip()
    log(f"fault 4: kill -9 of node {node}'s process (pid {pid} on this host)")
    t0, wall0 = time.monotonic(), time.time()
    run(["kill", "-9", pid])
    deadline = time.monotonic() + 60
    while int(run(["docker", "inspect", "-f", "{{.RestartCount}}", container]).strip()) <= restarts:
        if time.monotonic() > deadline:
            raise Failed(f"the restart policy did not restart node {node}")
        time.sleep(0.2)
    caught, index = cluster.wait_caught_up(node, t0)
    log(f"the restart policy restarted node {node}; at index {index} {caught:.1f} s after the crash")
    report["crash"] = {
        "node": node, "back_s": round(caught, 2),
        "writes_failed": timeline.failed_between(wall0, time.time()),
    }


def back_up_and_restore(cluster, timeline, workdir, report):
    """A follower stopped and copied, started; later stopped again, its
    volume wiped and the copy put back: it must catch up from there."""
    leader = cluster.leader()
    node = next(n for n in NODES if n != leader)
    service, volume = f"fusebox-{node}", f"{cluster.project}_data-{node}"
    in_volume = ["docker", "run", "--rm", "-v", f"{volume}:/data", "-v", f"{workdir}:/backup",
                 "--entrypoint", "sh", cluster.image, "-c"]
    log(f"backup: node {node} stopped, its data directory copied, started again")
    wall0 = time.time()
    cluster.compose("stop", "-t", "20", service)
    run(in_volume + ["tar -C /data -czf /backup/backup.tgz ."])
    cluster.compose("start", service)
    cluster.wait_healthy(node)
    time.sleep(5)  # the copy falls behind
    log(f"restore: node {node} stopped, its volume wiped, the copy put back")
    cluster.compose("stop", "-t", "20", service)
    run(in_volume + ["find /data -mindepth 1 -delete && tar -C /data -xzf /backup/backup.tgz"])
    t0 = time.monotonic()
    cluster.compose("start", service)
    cluster.wait_healthy(node)
    caught, index = cluster.wait_caught_up(node, t0)
    log(f"node {node} restored from its copy and at index {index} {caught:.1f} s after its start")
    report["backup_restore"] = {
        "node": node, "catch_up_s": round(caught, 2),
        "writes_failed": timeline.failed_between(wall0, time.time()),
    }


def check_metrics(report):
    """The manifests are valid, and every metric the Grafana dashboard uses
    is one a node exports."""
    with urllib.request.urlopen("http://127.0.0.1:7681/metrics", timeout=10) as answer:
        page = answer.read().decode()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(page)
        path = f.name
    try:
        out = run([os.path.join(REPO, "tests", "deploy", "validate-manifests.sh"), path], timeout=600)
    finally:
        os.unlink(path)
    print(out.strip())
    report["manifests_and_dashboard"] = "valid"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the image the nodes run")
    parser.add_argument("--cli", required=True, help="a fusebox binary for this host")
    parser.add_argument("--project", default="fusebox-deploy-test")
    args = parser.parse_args()

    cluster = Cluster(args.project, args.image, args.cli)
    workdir = tempfile.mkdtemp(prefix="fusebox-deploy-")
    os.chmod(workdir, 0o777)
    timeline = Timeline(os.path.join(workdir, "timeline.jsonl"))
    load = f"{args.project}-load"
    report = {}
    started = time.monotonic()
    try:
        log(f"starting the cluster from {COMPOSE_FILE} with image {args.image}")
        run(["docker", "rm", "-f", load], check=False)
        cluster.compose("down", "-v", "--remove-orphans")  # what an aborted run left
        cluster.compose("up", "-d", "--no-build")
        for node in NODES:
            cluster.wait_healthy(node)
        leader = cluster.leader()
        log(f"three nodes healthy, node {leader} leads")

        log("starting the load in a client container")
        cluster.compose(
            "run", "-d", "--name", load, "-v", f"{workdir}:/out", "cli",
            "bench", "soak", "--endpoints", ENDPOINTS, "--json",
            "--seconds", str(SOAK_MAX_S), "--settle-seconds", str(SETTLE_S),
            "--writers", "8", "--reporters", "2", "--timeline", "/out/timeline.jsonl",
        )
        time.sleep(5)
        if not timeline.lines():
            raise Failed("the load wrote no timeline: " + run(["docker", "logs", load], check=False))

        kill_the_leader(cluster, timeline, report)
        cut_off_the_leader(cluster, timeline, report)
        rolling_restart(cluster, timeline, report)
        crash_a_follower(cluster, timeline, report)
        back_up_and_restore(cluster, timeline, workdir, report)

        log("stopping the load; the soak checks what was acknowledged")
        time.sleep(3)
        run(["docker", "kill", "--signal", "TERM", load])
        code = int(run(["docker", "wait", load], timeout=SETTLE_S + 120).strip())
        output = run(["docker", "logs", load], check=False).strip()
        lines = output.splitlines()
        soak = json.loads(lines[-1]) if lines else {}
        report["soak"] = soak
        if code != 0 or soak.get("violations"):
            raise Failed(f"the soak found violations (exit {code}): {output[-4000:]}")
        check_metrics(report)
    except Exception as e:  # any error fails the test, with the nodes' logs
        log(f"FAILED: {e!r}" if not isinstance(e, Failed) else f"FAILED: {e}")
        for node in NODES:
            tail = run(["docker", "logs", "--tail", "30", cluster.container(node)], check=False)
            print(f"--- last log lines of node {node}:\n{tail}")
        report["failed"] = str(e)
    finally:
        run(["docker", "rm", "-f", load], check=False)
        try:
            cluster.compose("down", "-v", "--remove-orphans", timeout=120)
        except Exception as e:  # the teardown must not hide the result
            log(f"teardown: {e}")
        shutil.rmtree(workdir, ignore_errors=True)
        report["seconds"] = round(time.monotonic() - started, 1)

    print(json.dumps(report, indent=2))
    summary(report)
    sys.exit(1 if "failed" in report else 0)


class Fields(dict):
    """A report entry for str.format_map; a field it lacks reads as '?'."""

    def __missing__(self, key):
        return "?"


SUMMARY = (
    ("leader_kill", "leader kill: new leader in {new_leader_s} s, killed node caught up {catch_up_s} s after its start, {writes_failed} writes refused"),
    ("partition", "partition: new leader in {new_leader_s} s, cut-off node acknowledged {minority_writes_acknowledged} writes, caught up {catch_up_s} s after the heal, {writes_failed} writes refused"),
    ("rolling_restart", "rolling restart: node {node} back in {back_s} s, {writes_failed} writes refused"),
    ("crash", "crash: node {node} back in {back_s} s, {writes_failed} writes refused"),
    ("backup_restore", "backup and restore: node {node} caught up {catch_up_s} s after starting on its restored copy, {writes_failed} writes refused"),
    ("soak", "soak: {writes_acknowledged} writes acknowledged, {keys_completed} keys completed, {records_checked} records checked, {breakers_compared} breakers compared, {violations} violations"),
)


def summary(report):
    """One line per fault, then the verdict."""
    for key, line in SUMMARY:
        entries = report.get(key, [])
        for entry in entries if isinstance(entries, list) else [entries]:
            fields = Fields(entry)
            if isinstance(fields.get("violations"), list):
                fields["violations"] = len(fields["violations"])
            log(line.format_map(fields))
    log(f"deploy test {'FAILED' if 'failed' in report else 'passed'} in {report.get('seconds')} s")


if __name__ == "__main__":
    main()
