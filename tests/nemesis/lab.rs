//! The network the nodes live on: one Linux network namespace per node,
//! joined by a bridge in a hub namespace, with a veth from this machine's
//! own namespace so the test's clients reach every node. Faults are
//! iptables rules in a chain of their own in each node's namespace, so a
//! heal is one flush per node.
//!
//! ```text
//!   root ns: fbx-host 10.213.77.254 ─┐
//!   fbx-n1: eth0 10.213.77.1 ────────┤ fbx-hub: bridge br0
//!   ...                              │
//!   fbx-n5: eth0 10.213.77.5 ────────┘
//! ```
//!
//! Names and addresses are fixed, so two runs must not share a machine at
//! once; a run first removes whatever a killed earlier run left.

use anyhow::{bail, Context, Result};
use std::net::Ipv4Addr;
use std::process::Command;

/// The subnet's first three octets.
const SUBNET: [u8; 3] = [10, 213, 77];
/// This machine's own address on the bridge, where the clients are.
pub const HOST_OCTET: u8 = 254;
/// The hub namespace holding the bridge.
const HUB: &str = "fbx-hub";
/// The root namespace's end of its veth.
const HOST_IF: &str = "fbx-host";
/// The chain each node's faults go into, jumped to from INPUT.
const CHAIN: &str = "NEMESIS";
/// Most nodes a lab holds (their octets must stay below the host's).
pub const SLOTS_MAX: usize = 9;

/// Runs a command, failing with its output if it fails.
pub fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The lab's namespaces and links, removed on drop.
pub struct Lab {
    slots: usize,
}

impl Lab {
    /// Builds namespaces for `slots` nodes, after removing any a killed
    /// earlier run left behind. Needs root (CAP_NET_ADMIN).
    pub fn create(slots: usize) -> Result<Lab> {
        if slots == 0 || slots > SLOTS_MAX {
            bail!("a lab holds 1 to {SLOTS_MAX} nodes, not {slots}");
        }
        teardown(SLOTS_MAX);
        let lab = Lab { slots };
        lab.build()
            .context("building the network namespaces (needs root)")?;
        Ok(lab)
    }

    fn build(&self) -> Result<()> {
        run("ip", &["netns", "add", HUB])?;
        in_ns(HUB, "ip", &["link", "add", "br0", "type", "bridge"])?;
        in_ns(HUB, "ip", &["link", "set", "br0", "up"])?;
        // This machine's end: the clients and the test itself.
        run(
            "ip",
            &[
                "link", "add", HOST_IF, "type", "veth", "peer", "name", "host", "netns", HUB,
            ],
        )?;
        let host = format!("{}/24", ip(HOST_OCTET));
        run("ip", &["addr", "add", &host, "dev", HOST_IF])?;
        run("ip", &["link", "set", HOST_IF, "up"])?;
        attach("host")?;
        for slot in 1..=self.slots {
            let ns = ns_of(slot);
            let hub_end = format!("v{slot}");
            run("ip", &["netns", "add", &ns])?;
            run(
                "ip",
                &[
                    "link", "add", &hub_end, "netns", HUB, "type", "veth", "peer", "name", "eth0",
                    "netns", &ns,
                ],
            )?;
            attach(&hub_end)?;
            let addr = format!("{}/24", node_ip(slot));
            in_ns(&ns, "ip", &["addr", "add", &addr, "dev", "eth0"])?;
            in_ns(&ns, "ip", &["link", "set", "eth0", "up"])?;
            in_ns(&ns, "ip", &["link", "set", "lo", "up"])?;
            in_ns(&ns, "iptables", &["-N", CHAIN])?;
            in_ns(&ns, "iptables", &["-A", "INPUT", "-j", CHAIN])?;
        }
        Ok(())
    }

    /// How many node slots the lab has.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Node `slot` stops hearing from the nodes in `from` (its own
    /// incoming traffic only: a one-way fault unless they drop it too).
    pub fn deafen(&self, slot: usize, from: &[usize]) -> Result<()> {
        for &other in from {
            let source = node_ip(other).to_string();
            in_ns(
                &ns_of(slot),
                "iptables",
                &["-A", CHAIN, "-s", &source, "-j", "DROP"],
            )?;
        }
        Ok(())
    }

    /// Cuts every link between the two groups, both ways.
    pub fn partition(&self, left: &[usize], right: &[usize]) -> Result<()> {
        for &slot in left {
            self.deafen(slot, right)?;
        }
        for &slot in right {
            self.deafen(slot, left)?;
        }
        Ok(())
    }

    /// Every node drops `percent` of the packets it receives, from peers
    /// and clients alike.
    pub fn lose(&self, percent: u8) -> Result<()> {
        let probability = format!("{:.2}", f64::from(percent.min(100)) / 100.0);
        for slot in 1..=self.slots {
            in_ns(
                &ns_of(slot),
                "iptables",
                &[
                    "-A",
                    CHAIN,
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &probability,
                    "-j",
                    "DROP",
                ],
            )?;
        }
        Ok(())
    }

    /// Removes every network fault.
    pub fn heal(&self) -> Result<()> {
        for slot in 1..=self.slots {
            in_ns(&ns_of(slot), "iptables", &["-F", CHAIN])?;
        }
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        teardown(self.slots);
    }
}

/// Kills whatever runs in the lab's namespaces and deletes them. Best
/// effort: what is not there is skipped.
fn teardown(slots: usize) {
    for slot in 1..=slots {
        let ns = ns_of(slot);
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = run("kill", &["-KILL", pid]);
            }
        }
        let _ = run("ip", &["netns", "del", &ns]);
    }
    let _ = run("ip", &["link", "del", HOST_IF]);
    let _ = run("ip", &["netns", "del", HUB]);
}

/// Attaches a hub-side interface to the bridge and brings it up.
fn attach(interface: &str) -> Result<()> {
    in_ns(HUB, "ip", &["link", "set", interface, "master", "br0"])?;
    in_ns(HUB, "ip", &["link", "set", interface, "up"])
}

/// Runs a command inside namespace `ns`.
pub fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<()> {
    let mut all = vec!["netns", "exec", ns, program];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// The namespace of node slot `slot`.
pub fn ns_of(slot: usize) -> String {
    format!("fbx-n{slot}")
}

/// An address on the lab's subnet.
fn ip(octet: u8) -> Ipv4Addr {
    Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], octet)
}

/// Node slot `slot`'s address.
pub fn node_ip(slot: usize) -> Ipv4Addr {
    ip(u8::try_from(slot).unwrap_or(HOST_OCTET - 1))
}
