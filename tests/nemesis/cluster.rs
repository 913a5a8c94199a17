//! The `fusebox serve` processes, one per namespace, each behind its
//! delaying relay, and what the test asks of them over the Cluster API.

use crate::lab::{self, node_ip, Lab};
use anyhow::{bail, Context, Result};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::cluster_client::ClusterClient;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// The port each node's own gRPC listener binds.
const NODE_PORT: u16 = 7000;
/// The port its relay listens on: the address the node advertises.
const RELAY_PORT: u16 = 7001;
/// Deadline of a status call.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// Deadline of one membership call.
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one membership change may take, over every node tried.
const MEMBERSHIP_CHANGE_MAX: Duration = Duration::from_secs(30);

/// What a node's process is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// Serving.
    Up,
    /// Frozen by SIGSTOP.
    Paused,
    /// Killed (SIGKILL), not restarted yet.
    Down,
}

/// One node's process and relay.
struct Node {
    child: Option<Child>,
    relay: Option<Child>,
    run: Run,
}

/// The cluster under test.
pub struct Cluster {
    lab: Lab,
    fusebox: PathBuf,
    /// A bug every node is started with (`serve --fault-inject-bug`).
    bug: Option<String>,
    dir: PathBuf,
    nodes: BTreeMap<usize, Node>,
}

/// Node slot `slot`'s advertised address (its relay), for clients and peers.
pub fn addr(slot: usize) -> String {
    format!("{}:{RELAY_PORT}", node_ip(slot))
}

/// A lazily connected channel with a deadline per call, and HTTP/2
/// keepalive so a connection into a partition is dropped rather than
/// waited on.
pub fn channel(addr: &str, timeout: Duration) -> Result<Channel> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_millis(500))
        .timeout(timeout)
        .http2_keep_alive_interval(Duration::from_secs(1))
        .keep_alive_timeout(Duration::from_secs(2))
        .keep_alive_while_idle(true);
    Ok(endpoint.connect_lazy())
}

impl Cluster {
    /// Starts `lab.slots()` nodes forming one cluster, node ids = slots,
    /// each with `bug` injected when one is named.
    pub fn start(lab: Lab, fusebox: PathBuf, dir: PathBuf, bug: Option<String>) -> Result<Cluster> {
        std::fs::create_dir_all(dir.join("logs"))?;
        let mut cluster = Cluster {
            nodes: BTreeMap::new(),
            lab,
            fusebox,
            bug,
            dir,
        };
        for slot in 1..=cluster.lab.slots() {
            cluster.set_delay(slot, 0)?;
            cluster.set_clock(slot, 0)?;
            let relay = cluster.spawn_relay(slot)?;
            cluster.nodes.insert(
                slot,
                Node {
                    child: None,
                    relay: Some(relay),
                    run: Run::Down,
                },
            );
            cluster.spawn(slot)?;
        }
        Ok(cluster)
    }

    /// The network.
    pub fn lab(&self) -> &Lab {
        &self.lab
    }

    /// Every node slot.
    pub fn slots(&self) -> Vec<usize> {
        (1..=self.lab.slots()).collect()
    }

    /// What node `slot`'s process is doing.
    pub fn run_of(&self, slot: usize) -> Run {
        self.nodes.get(&slot).map_or(Run::Down, |n| n.run)
    }

    fn log_file(&self, name: &str) -> Result<File> {
        let path = self.dir.join("logs").join(name);
        Ok(File::options().create(true).append(true).open(path)?)
    }

    fn spawn_relay(&self, slot: usize) -> Result<Child> {
        let me = std::env::current_exe().context("finding the nemesis binary")?;
        let listen = addr(slot);
        let to = format!("{}:{NODE_PORT}", node_ip(slot));
        let delay = self.dir.join(format!("delay-{slot}"));
        Command::new("ip")
            .args(["netns", "exec", &lab::ns_of(slot)])
            .arg(me)
            .args(["relay", "--listen", &listen, "--to", &to, "--delay-file"])
            .arg(&delay)
            .args(["--parent", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .stderr(self.log_file(&format!("relay-{slot}.log"))?)
            .spawn()
            .with_context(|| format!("starting node {slot}'s relay"))
    }

    /// (Re)starts node `slot` on its data directory: `ip netns exec`
    /// execs, so the child's pid is the node's.
    pub fn spawn(&mut self, slot: usize) -> Result<()> {
        let peers = self
            .slots()
            .iter()
            .map(|s| format!("{s}={}", addr(*s)))
            .collect::<Vec<_>>()
            .join(",");
        let listen = format!("{}:{NODE_PORT}", node_ip(slot));
        let data = self.dir.join(format!("data-{slot}"));
        let mut command = Command::new("ip");
        if let Some(bug) = &self.bug {
            command.env("FUSEBOX_FAULT_INJECT_BUG", bug);
        }
        let child = command
            .args(["netns", "exec", &lab::ns_of(slot)])
            .arg(&self.fusebox)
            .args(["serve", "--id", &slot.to_string(), "--listen", &listen])
            .args(["--advertise", &addr(slot), "--peers", &peers, "--insecure"])
            .arg("--data")
            .arg(&data)
            .env("FUSEBOX_FAULT_CLOCK_OFFSET_FILE", self.clock_file(slot))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(self.log_file(&format!("node-{slot}.log"))?)
            .spawn()
            .with_context(|| format!("starting node {slot}"))?;
        let node = self.nodes.get_mut(&slot).context("no such node")?;
        node.child = Some(child);
        node.run = Run::Up;
        Ok(())
    }

    /// SIGKILLs node `slot` (its relay stays).
    pub fn kill(&mut self, slot: usize) -> Result<()> {
        let node = self.nodes.get_mut(&slot).context("no such node")?;
        if let Some(mut child) = node.child.take() {
            if node.run == Run::Paused {
                let _ = signal(&child, "-CONT");
            }
            child.kill()?;
            child.wait()?;
        }
        node.run = Run::Down;
        Ok(())
    }

    /// Freezes node `slot` (SIGSTOP).
    pub fn pause(&mut self, slot: usize) -> Result<()> {
        self.set_run(slot, Run::Paused, "-STOP")
    }

    /// Lets node `slot` run again (SIGCONT).
    pub fn resume(&mut self, slot: usize) -> Result<()> {
        self.set_run(slot, Run::Up, "-CONT")
    }

    fn set_run(&mut self, slot: usize, run: Run, sig: &str) -> Result<()> {
        let node = self.nodes.get_mut(&slot).context("no such node")?;
        let Some(child) = &node.child else {
            bail!("node {slot} is not running");
        };
        signal(child, sig)?;
        node.run = run;
        Ok(())
    }

    /// Brings every node back: resumes the paused, restarts the killed.
    pub fn revive_all(&mut self) -> Result<()> {
        for slot in self.slots() {
            match self.run_of(slot) {
                Run::Paused => self.resume(slot)?,
                Run::Down => self.spawn(slot)?,
                Run::Up => {}
            }
        }
        Ok(())
    }

    /// Whether node `slot`'s process died on its own (not killed by us).
    pub fn exited(&mut self, slot: usize) -> Option<std::process::ExitStatus> {
        let node = self.nodes.get_mut(&slot)?;
        node.child.as_mut()?.try_wait().ok().flatten()
    }

    fn clock_file(&self, slot: usize) -> PathBuf {
        self.dir.join(format!("clock-{slot}"))
    }

    /// Offsets node `slot`'s wall clock by `ms` (its fault clock file).
    pub fn set_clock(&self, slot: usize, ms: i64) -> Result<()> {
        write_now(&self.clock_file(slot), &ms.to_string())
    }

    /// Makes node `slot`'s relay hold bytes `ms` each way.
    pub fn set_delay(&self, slot: usize, ms: u64) -> Result<()> {
        write_now(&self.dir.join(format!("delay-{slot}")), &ms.to_string())
    }

    /// Node `slot`'s status, if it answers within a second.
    pub async fn status(&self, slot: usize) -> Option<pb::StatusResponse> {
        let mut client = ClusterClient::new(channel(&addr(slot), STATUS_TIMEOUT).ok()?);
        let request = pb::StatusRequest::default();
        client.status(request).await.ok().map(|r| r.into_inner())
    }

    /// The leader's slot: of the running nodes asked at once, the one that
    /// says it leads in the highest term.
    pub async fn leader(&self) -> Option<usize> {
        let up = self
            .slots()
            .into_iter()
            .filter(|s| self.run_of(*s) == Run::Up);
        let statuses = futures::future::join_all(up.map(|slot| self.status(slot))).await;
        statuses
            .into_iter()
            .flatten()
            .filter(|status| status.leader_id == Some(status.node_id))
            .max_by_key(|status| status.term)
            .and_then(|status| usize::try_from(status.node_id).ok())
    }

    /// Asks each running node in turn to remove node `id` from the
    /// membership, until one does.
    pub async fn remove_member(&self, id: usize) -> Result<()> {
        self.membership(|mut client| async move {
            let request = pb::RemoveMemberRequest {
                id: id as u64,
                ..Default::default()
            };
            client.remove_member(request).await.map(|_| ())
        })
        .await
    }

    /// Asks each running node in turn to add node `id` back, as a voter.
    pub async fn add_member(&self, id: usize) -> Result<()> {
        self.membership(|mut client| async move {
            let request = pb::AddMemberRequest {
                id: id as u64,
                address: addr(id),
                ..Default::default()
            };
            client.add_member(request).await.map(|_| ())
        })
        .await
    }

    async fn membership<F, Fut>(&self, mut change: F) -> Result<()>
    where
        F: FnMut(ClusterClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<(), tonic::Status>>,
    {
        let mut last = String::from("no node was running");
        let deadline = tokio::time::Instant::now() + MEMBERSHIP_CHANGE_MAX;
        for slot in self.slots() {
            if self.run_of(slot) != Run::Up {
                continue;
            }
            let client = ClusterClient::new(channel(&addr(slot), MEMBERSHIP_TIMEOUT)?);
            match tokio::time::timeout_at(deadline, change(client)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(s)) => last = format!("through node {slot}: {:?} {}", s.code(), s.message()),
                Err(_) => bail!("no answer within {MEMBERSHIP_CHANGE_MAX:?} ({last})"),
            }
        }
        bail!("{last}")
    }

    /// The voters as node `slot` knows them.
    pub async fn voters(&self, slot: usize) -> Option<Vec<usize>> {
        let status = self.status(slot).await?;
        let voter = |m: &pb::Member| {
            matches!(
                pb::MemberRole::try_from(m.role),
                Ok(pb::MemberRole::Leader | pb::MemberRole::Follower | pb::MemberRole::Candidate)
            )
        };
        let ids = status.members.iter().filter(|m| voter(m));
        Some(ids.filter_map(|m| usize::try_from(m.id).ok()).collect())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            for child in [node.child.as_mut(), node.relay.as_mut()]
                .into_iter()
                .flatten()
            {
                let _ = signal(child, "-CONT");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn signal(child: &Child, sig: &str) -> Result<()> {
    lab::run("kill", &[sig, &child.id().to_string()])
}

/// Replaces `file`'s content at once (write a sibling, then rename), so a
/// reader polling it never sees half a number.
fn write_now(file: &Path, text: &str) -> Result<()> {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, file)?;
    Ok(())
}
