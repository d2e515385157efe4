//! Linux hosts behind the guest's ports (`--backend tap --hosts`): once QEMU has opened its tap
//! devices, each tap moves into a network namespace of its own with an address, so the
//! distribution's tools (`ping`, `curl`, `iperf3`) talk to Gannet as real hosts would. Nothing
//! touches the root namespace; the namespaces (and the taps in them) are deleted on drop, and
//! after a SIGKILL by the next run's stale-namespace sweep (they are named `gnt-PID-N` like
//! [`TapNet`]'s).
//!
//! Addressing, derived from the kernel command line:
//! * `mode=router ip0=A/L ip1=B/M`: host *i* gets the first address of port *i*'s network that
//!   is not the router's (10.0.0.1/24 → 10.0.0.2/24) and a default route via the router's
//!   address. With `ip6_0=`/`ip6_1=` (the router's IPv6), the host gets an IPv6 address the
//!   same way (2001:db8::1/64 → 2001:db8::2/64) and a default IPv6 route via the router; IPv6
//!   stays on in its namespace, with router advertisements and duplicate address detection
//!   off (`accept_ra=0`, `accept_dad=0`: no Router Solicitation, no DAD probe), so what it
//!   sends the router is its traffic, its Neighbor Discovery and its MLD reports. A plan may
//!   instead take IPv6 by stateless autoconfiguration ([`HostPlan::slaac`]: the router's
//!   advertisements, `ra6=on`). Otherwise IPv6 is off in the namespace: the host sends nothing
//!   unasked.
//! * l2/io: one subnet, 10.10.0.(i+1)/24 for host *i*, no route; each tap takes the MAC the
//!   guest sends to on its port (`peer0=`/`peer1=`, default `02:00:00:00:0a:02`,
//!   `02:00:00:00:0b:02`), so l2 forwarding reaches the host.
//!
//! MTU: [`plan_with_mtu`] gives every host an MTU of its own (its tap's, set in its namespace
//! before the link goes up), independent of the guest ports' MTU (QEMU's `host_mtu`,
//! [`crate::qemu::GuestConfig::mtu`]): hosts at 9000 behind ports offering 1500, say. Without
//! it a host keeps the tap's MTU from [`TapNet`] (its `--mtu`, else 1500).

use crate::mtu::Mtus;
use crate::tap::{add_namespace, ip, tap_name, TapNet};
use anyhow::{bail, Context, Result};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::{Command, Output};

/// One host: the namespace, its address and prefix length, its gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPlan {
    /// Guest port the host sits behind (its tap is `gtap{port}`).
    pub port: usize,
    /// The host's address.
    pub addr: Ipv4Addr,
    /// Prefix length of its network.
    pub len: u8,
    /// Default gateway (the router's address on that port), if any.
    pub gateway: Option<Ipv4Addr>,
    /// MAC for its tap device (l2/io: the guest's `peerN=`), if one is needed.
    pub mac: Option<String>,
    /// MTU of its interface (`ip link set dev gtapN mtu M` in its namespace); `None` keeps
    /// the tap's.
    pub mtu: Option<u16>,
    /// Its IPv6 address and prefix length, and the default IPv6 gateway (the router's
    /// address on that port); `None`: IPv6 off in its namespace.
    pub ipv6: Option<(Ipv6Addr, u8, Ipv6Addr)>,
    /// IPv6 by stateless autoconfiguration instead (RFC 4862): on, with router
    /// advertisements accepted (`accept_ra=1`, `autoconf=1`; DAD off), no static address or
    /// route: what the router's advertisements give it (`ra6=on`).
    pub slaac: bool,
}

/// The value of `key=` on a kernel command line.
fn cmdline_value<'a>(append: &'a str, key: &str) -> Option<&'a str> {
    append
        .split_ascii_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// The hosts for `ports` ports and kernel command line `append` (module docs).
///
/// # Errors
/// Router mode without a parsable `ip0=`/`ip1=`, or a network with no free host address.
pub fn plan(append: &str, ports: usize) -> Result<Vec<HostPlan>> {
    plan_with_mtu(append, ports, None)
}

/// [`plan`], with host *i*'s interface MTU `mtus.port(i)` (one value for every host, or one
/// per port as [`Mtus`] has it).
///
/// # Errors
/// As [`plan`]; also `mtus` with a number of values that does not fit `ports`.
pub fn plan_with_mtu(append: &str, ports: usize, mtus: Option<&Mtus>) -> Result<Vec<HostPlan>> {
    if let Some(m) = mtus {
        m.check_ports(ports).context("--hosts")?;
    }
    let mut plans = plan_addresses(append, ports)?;
    for p in &mut plans {
        p.mtu = mtus.map(|m| m.port(p.port));
    }
    Ok(plans)
}

fn plan_addresses(append: &str, ports: usize) -> Result<Vec<HostPlan>> {
    if cmdline_value(append, "mode") == Some("router") {
        return (0..ports)
            .map(|i| {
                let key = format!("ip{i}");
                let v = cmdline_value(append, &key)
                    .with_context(|| format!("--hosts in router mode needs {key}="))?;
                let (a, l) = v.split_once('/').context("ipN= is ADDR/LEN")?;
                let router: Ipv4Addr = a.parse().with_context(|| format!("{key}={v}"))?;
                let len: u8 = l.parse().with_context(|| format!("{key}={v}"))?;
                if !(8..=30).contains(&len) {
                    bail!("--hosts: {key}={v}: the network needs room for a host (/8../30)");
                }
                let mask = u32::MAX << (32 - len);
                let net = u32::from(router) & mask;
                let first = net + 1;
                let host = if first == u32::from(router) {
                    first + 1
                } else {
                    first
                };
                Ok(HostPlan {
                    port: i,
                    addr: Ipv4Addr::from(host),
                    len,
                    gateway: Some(router),
                    mac: None,
                    mtu: None,
                    ipv6: plan_ipv6(append, i)?,
                    slaac: false,
                })
            })
            .collect();
    }
    Ok((0..ports)
        .map(|i| HostPlan {
            port: i,
            addr: Ipv4Addr::new(10, 10, 0, i as u8 + 1),
            len: 24,
            gateway: None,
            mac: Some(
                cmdline_value(append, &format!("peer{}", i % 2))
                    .map(str::to_string)
                    .unwrap_or_else(|| mac_string(crate::gen::peer_mac(i % 2))),
            ),
            mtu: None,
            ipv6: None,
            slaac: false,
        })
        .collect())
}

/// Host *i*'s IPv6 address, prefix length and gateway from the router's `ip6_i=` (the first
/// address of the prefix that is not the router's), or `None` without the key.
fn plan_ipv6(append: &str, i: usize) -> Result<Option<(Ipv6Addr, u8, Ipv6Addr)>> {
    let key = format!("ip6_{i}");
    let Some(v) = cmdline_value(append, &key) else {
        return Ok(None);
    };
    let (a, l) = v.split_once('/').context("ip6_N= is ADDR/LEN")?;
    let router: Ipv6Addr = a.parse().with_context(|| format!("{key}={v}"))?;
    let len: u8 = l.parse().with_context(|| format!("{key}={v}"))?;
    if !(16..=126).contains(&len) {
        bail!("--hosts: {key}={v}: the network needs room for a host (/16../126)");
    }
    let net = u128::from(router) & (u128::MAX << (128 - u32::from(len)));
    let first = net + 1;
    let host = if first == u128::from(router) {
        first + 1
    } else {
        first
    };
    Ok(Some((Ipv6Addr::from(host), len, router)))
}

/// `aa:bb:cc:dd:ee:ff`.
fn mac_string(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The hosts' namespaces; deleted on drop.
#[derive(Debug)]
pub struct Hosts {
    names: Vec<String>,
    plans: Vec<HostPlan>,
}

impl Hosts {
    /// Moves each planned port's tap out of `net` (QEMU has it open already) into a new
    /// namespace and configures it there: MAC and MTU if planned, address, up, loopback up,
    /// IPv6 off, the route.
    ///
    /// # Errors
    /// An `ip`/`sysctl` command failing (namespaces made so far are deleted).
    pub fn create(net: &TapNet, plans: &[HostPlan]) -> Result<Hosts> {
        let mut hosts = Hosts {
            names: Vec::new(),
            plans: plans.to_vec(),
        };
        for p in plans {
            let ns = add_namespace()?;
            hosts.names.push(ns.clone());
            let tap = tap_name(p.port);
            ip(&["-n", net.name(), "link", "set", &tap, "netns", &ns])?;
            // Before the link goes up (its link-local address is made then).
            let dev_key = |k: &str| format!("net.ipv6.conf.{tap}.{k}");
            let sysctls = match p.ipv6 {
                None if p.slaac => vec![
                    format!("{}=0", dev_key("disable_ipv6")),
                    format!("{}=1", dev_key("accept_ra")),
                    format!("{}=1", dev_key("autoconf")),
                    format!("{}=0", dev_key("accept_dad")),
                ],
                None => vec![
                    "net.ipv6.conf.all.disable_ipv6=1".to_string(),
                    "net.ipv6.conf.default.disable_ipv6=1".to_string(),
                ],
                Some(_) => vec![
                    format!("{}=0", dev_key("disable_ipv6")),
                    format!("{}=0", dev_key("accept_ra")),
                    format!("{}=0", dev_key("accept_dad")),
                    format!("{}=0", dev_key("router_solicitations")),
                ],
            };
            let out = Command::new("ip")
                .args(["netns", "exec", &ns, "sysctl", "-qw"])
                .args(&sysctls)
                .output()
                .context("running sysctl in a host namespace")?;
            if !out.status.success() {
                bail!(
                    "IPv6 settings in {ns} ({}): {}",
                    sysctls.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            if let Some(mac) = &p.mac {
                ip(&["-n", &ns, "link", "set", &tap, "address", mac])?;
            }
            if let Some(mtu) = p.mtu {
                ip(&[
                    "-n",
                    &ns,
                    "link",
                    "set",
                    "dev",
                    &tap,
                    "mtu",
                    &mtu.to_string(),
                ])?;
            }
            let cidr = format!("{}/{}", p.addr, p.len);
            ip(&["-n", &ns, "addr", "add", &cidr, "dev", &tap])?;
            if let Some((a6, l6, _)) = p.ipv6 {
                let cidr6 = format!("{a6}/{l6}");
                ip(&["-n", &ns, "-6", "addr", "add", &cidr6, "dev", &tap, "nodad"])?;
            }
            ip(&["-n", &ns, "link", "set", &tap, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            if let Some(gw) = p.gateway {
                ip(&["-n", &ns, "route", "add", "default", "via", &gw.to_string()])?;
            }
            if let Some((_, _, gw6)) = p.ipv6 {
                let gw6 = gw6.to_string();
                ip(&[
                    "-n", &ns, "-6", "route", "add", "default", "via", &gw6, "dev", &tap,
                ])?;
            }
        }
        Ok(hosts)
    }

    /// The namespace of the host behind port `port`.
    pub fn namespace(&self, port: usize) -> Option<&str> {
        self.plans
            .iter()
            .position(|p| p.port == port)
            .map(|i| self.names[i].as_str())
    }

    /// The plan of every host.
    pub fn plans(&self) -> &[HostPlan] {
        &self.plans
    }

    /// Runs `cmd` in the namespace of the host behind `port` (`ip netns exec NS cmd…`).
    ///
    /// # Errors
    /// No host on `port`, or the command cannot be started (its failure is in the `Output`).
    pub fn exec(&self, port: usize, cmd: &[&str]) -> Result<Output> {
        let ns = self
            .namespace(port)
            .with_context(|| format!("no host behind port {port}"))?;
        Command::new("ip")
            .args(["netns", "exec", ns])
            .args(cmd)
            .output()
            .with_context(|| format!("running {} in {ns}", cmd.join(" ")))
    }

    /// A counter of `ip -s -j link show dev gtapN` in the namespace of the host behind `port`
    /// (`dir` is `rx` or `tx`, `field` e.g. `packets`, `dropped`).
    ///
    /// # Errors
    /// `ip` failing or printing no such counter.
    pub fn link_stat(&self, port: usize, dir: &str, field: &str) -> Result<u64> {
        let dev = tap_name(port);
        let o = self.exec(port, &["ip", "-s", "-j", "link", "show", "dev", &dev])?;
        if !o.status.success() {
            bail!(
                "ip -s link in host {port}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).context("ip -j output")?;
        j[0]["stats64"][dir][field]
            .as_u64()
            .with_context(|| format!("no stats64.{dir}.{field} in {j}"))
    }

    /// A counter of `/proc/net/snmp` in the namespace of the host behind `port` (`group` is
    /// `Ip`, `Udp`, `Tcp`, `Icmp`, …).
    ///
    /// # Errors
    /// The file unreadable or without that counter.
    pub fn snmp_stat(&self, port: usize, group: &str, field: &str) -> Result<u64> {
        let o = self.exec(port, &["cat", "/proc/net/snmp"])?;
        let text = String::from_utf8_lossy(&o.stdout);
        let prefix = format!("{group}: ");
        let mut rows = text.lines().filter(|l| l.starts_with(&prefix));
        let (Some(names), Some(values)) = (rows.next(), rows.next()) else {
            bail!("no {group} rows in /proc/net/snmp of host {port}");
        };
        let i = names
            .split_whitespace()
            .position(|n| n == field)
            .with_context(|| format!("no {group} {field} in /proc/net/snmp"))?;
        values
            .split_whitespace()
            .nth(i)
            .context("short /proc/net/snmp row")?
            .parse()
            .context("/proc/net/snmp value")
    }

    /// `iperf3 -u -b 0` for `secs` seconds with `payload`-byte datagrams from the host behind
    /// port `from` to the one behind port `to` (its server runs once, `-1`), with the counters
    /// that say where every datagram went ([`UdpRun`]).
    ///
    /// # Errors
    /// The server or client failing (60 s timeout), no JSON, or a counter unreadable.
    pub fn iperf3_udp(&self, from: usize, to: usize, payload: usize, secs: u32) -> Result<UdpRun> {
        let dst = self
            .plans
            .iter()
            .find(|p| p.port == to)
            .with_context(|| format!("no host behind port {to}"))?
            .addr
            .to_string();
        let counters = |h: &Hosts| -> Result<[u64; 8]> {
            Ok([
                h.snmp_stat(from, "Udp", "SndbufErrors")?,
                h.link_stat(from, "tx", "dropped")?,
                h.link_stat(to, "rx", "dropped")?,
                h.snmp_stat(to, "Udp", "InErrors")?,
                h.snmp_stat(to, "Ip", "InDelivers")?
                    - h.snmp_stat(to, "Tcp", "InSegs")?
                    - h.snmp_stat(to, "Icmp", "InMsgs")?,
                h.snmp_stat(to, "Udp", "NoPorts")?,
                h.snmp_stat(from, "Tcp", "OutSegs")? + h.snmp_stat(to, "Tcp", "OutSegs")?,
                backlog_drops()?,
            ])
        };
        let before = counters(self)?;
        let ns = self.namespace(to).context("no receiving host")?;
        let mut server = Command::new("ip")
            .args(["netns", "exec", ns, "iperf3", "-s", "-1", "-B", &dst])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting the iperf3 server")?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (len, t) = (payload.to_string(), secs.to_string());
        let o = self.exec(
            from,
            &[
                "timeout",
                "60",
                "iperf3",
                "-u",
                "-c",
                &dst,
                "-l",
                &len,
                "-b",
                "0",
                "-t",
                &t,
                "--connect-timeout",
                "5000",
                "-J",
            ],
        );
        let _ = server.kill();
        let _ = server.wait();
        let o = o?;
        if !o.status.success() {
            bail!(
                "iperf3 -u: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).context("iperf3 -J output")?;
        // Let the last frames drain before the counters are read.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let after = counters(self)?;
        let d: [u64; 8] = core::array::from_fn(|i| after[i] - before[i]);
        let sent = j["end"]["sum_sent"]["packets"]
            .as_u64()
            .context("iperf3: no end.sum_sent.packets")?;
        let read = j["end"]["sum_received"]["bytes"]
            .as_u64()
            .context("iperf3: no end.sum_received.bytes")?
            / payload as u64;
        Ok(UdpRun {
            seconds: secs,
            sent,
            read,
            sender_qdisc: d[0],
            sender_tap: d[1],
            receiver_tap: d[2],
            receiver_socket: d[3],
            arrived: d[4],
            no_ports: d[5],
            tcp_segments: d[6],
            backlog: d[7],
        })
    }

    /// How to use the hosts, for the console: each host's addresses and a ping to try (its
    /// gateway, else another host).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (p, ns) in self.plans.iter().zip(&self.names) {
            let other = self.plans.iter().find(|o| o.port != p.port).map(|o| o.addr);
            s.push_str(&format!(
                "xtask: host behind port {}: {}/{}{}{}{} in namespace {ns}: ip netns exec {ns} ping {}\n",
                p.port,
                p.addr,
                p.len,
                p.gateway.map(|g| format!(" via {g}")).unwrap_or_default(),
                p.ipv6
                    .map(|(a, l, g)| format!(", {a}/{l} via {g}"))
                    .unwrap_or_default(),
                p.mtu.map(|m| format!(", MTU {m}")).unwrap_or_default(),
                p.gateway.or(other).unwrap_or(p.addr),
            ));
        }
        s
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("xtask: warning: deleting host namespace {ns}: {e:#}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_hosts_take_the_first_free_address_and_route_via_the_router() {
        let p = plan("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24", 2).unwrap();
        assert_eq!(p[0].addr, Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p[0].gateway, Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(p[1].addr, Ipv4Addr::new(10, 0, 1, 2));
        let p = plan("mode=router ip0=192.168.5.9/16 ip1=10.0.1.1/24", 2).unwrap();
        assert_eq!((p[0].addr, p[0].len), (Ipv4Addr::new(192, 168, 0, 1), 16));
        assert!(plan("mode=router ip0=10.0.0.1/24", 2).is_err());
        assert!(plan("mode=router ip0=10.0.0.1/31 ip1=10.0.1.1/24", 2).is_err());
    }

    #[test]
    fn l2_hosts_share_a_subnet_and_take_the_peer_macs() {
        let p = plan("mode=l2 peer1=02:11:22:33:44:55", 2).unwrap();
        assert_eq!(p[0].addr, Ipv4Addr::new(10, 10, 0, 1));
        assert_eq!(p[1].addr, Ipv4Addr::new(10, 10, 0, 2));
        assert_eq!(p[0].mac.as_deref(), Some("02:00:00:00:0a:02"));
        assert_eq!(p[1].mac.as_deref(), Some("02:11:22:33:44:55"));
        assert_eq!(p[0].gateway, None);
        assert_eq!(p[0].mtu, None);
    }

    #[test]
    fn host_mtus_per_port_or_for_all() {
        let all = Mtus::parse("9000").unwrap();
        let p =
            plan_with_mtu("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24", 2, Some(&all)).unwrap();
        assert_eq!((p[0].mtu, p[1].mtu), (Some(9000), Some(9000)));
        assert_eq!(p[1].addr, Ipv4Addr::new(10, 0, 1, 2));
        let each = Mtus::parse("9000,1500").unwrap();
        let p = plan_with_mtu("mode=l2", 2, Some(&each)).unwrap();
        assert_eq!((p[0].mtu, p[1].mtu), (Some(9000), Some(1500)));
        assert_eq!(p[1].mac.as_deref(), Some("02:00:00:00:0b:02"));
        let three = Mtus::parse("9000,1500,1500").unwrap();
        let err = plan_with_mtu("mode=l2", 2, Some(&three)).unwrap_err();
        assert_eq!(
            err.root_cause().downcast_ref::<crate::mtu::MtuError>(),
            Some(&crate::mtu::MtuError::PortCount {
                values: 3,
                ports: 2
            })
        );
        assert_eq!(plan_with_mtu("mode=l2", 2, None).unwrap()[0].mtu, None);
    }
}

/// Where the datagrams of one [`Hosts::iperf3_udp`] run went (counts of datagrams, or of
/// frames where a counter does not tell protocols apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRun {
    /// Length of the run (s).
    pub seconds: u32,
    /// Sent by the client (iperf3 `end.sum_sent.packets`).
    pub sent: u64,
    /// Read by the server (its bytes / payload: its `lost_packets` counts only gaps below the
    /// highest sequence number it saw, not a lost tail).
    pub read: u64,
    /// Dropped by the sender's queue discipline (its `Udp: SndbufErrors`).
    pub sender_qdisc: u64,
    /// Dropped by the sender's tap because QEMU did not read them in time (`ip -s link` TX
    /// dropped; frames).
    pub sender_tap: u64,
    /// Dropped by the receiver's tap (`ip -s link` RX dropped; frames).
    pub receiver_tap: u64,
    /// Arrived but dropped by the receiver's UDP, socket buffer full (`Udp: InErrors`).
    pub receiver_socket: u64,
    /// Arrived at the receiver's IP layer: its `Ip: InDelivers` less `Tcp: InSegs` and `Icmp:
    /// InMsgs` (UDP's own counters fall short of these by a few dozen per run).
    pub arrived: u64,
    /// Arrived after the server closed its socket (`Udp: NoPorts`).
    pub no_ports: u64,
    /// TCP segments both hosts sent meanwhile (iperf3's control connection): frames the
    /// per-frame counters may also count.
    pub tcp_segments: u64,
    /// Frames the machine's kernel dropped from its input backlogs meanwhile
    /// (`/proc/net/softnet_stat`, machine-wide).
    pub backlog: u64,
}

impl UdpRun {
    /// Datagrams sent that no counter accounts for, with `guest_drops` frames dropped in
    /// between (the guest's port and router drop counters): `sent − arrived − every drop`.
    /// Within `−tcp_segments..=backlog` when the books balance.
    pub fn unaccounted(&self, guest_drops: u64) -> i64 {
        self.sent as i64
            - (self.arrived + self.sender_qdisc + self.sender_tap + guest_drops + self.receiver_tap)
                as i64
    }
}

/// Frames this machine's kernel dropped from its per-CPU input backlogs since boot (the second
/// column of `/proc/net/softnet_stat`, hexadecimal, one row per CPU; machine-wide).
///
/// # Errors
/// The file unreadable or malformed.
pub fn backlog_drops() -> Result<u64> {
    let text =
        std::fs::read_to_string("/proc/net/softnet_stat").context("/proc/net/softnet_stat")?;
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|h| u64::from_str_radix(h, 16).context("softnet_stat counter"))
        .sum()
}
