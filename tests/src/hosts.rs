//! Helpers for the tests with Linux hosts behind the ports (`harness::hosts`): a command's
//! output for assertion messages, and one iperf3 TCP run between the two hosts.

use crate::{image, GuestConfig, READY_TIMEOUT};
use harness::hosts::{plan_with_mtu, HostPlan, Hosts};
use harness::mtu::Mtus;
use harness::qemu::{Backend, Guest};
use harness::tap::TapNet;

/// Boot the image with kernel command line `append` (router mode with `ip0`/`ip1`) on two tap
/// ports, ready, with a Linux host behind each (`harness::hosts`); with `mtu`, QEMU's
/// `host_mtu`, the taps and the hosts' interfaces all at that MTU. Drop order: hosts, then
/// the guest's namespace (the caller drops them explicitly after quitting the guest).
///
/// # Panics
/// If the namespace, the boot or the hosts cannot be set up.
pub fn boot_with_hosts(append: &str, mtu: Option<u16>) -> (TapNet, Guest, Hosts) {
    boot_with_host_mtus(append, mtu.map(|m| vec![m]))
}

/// [`boot_with_hosts`] with one MTU per port (`mtus[i]` for port *i*: QEMU's `host_mtu`, its
/// tap and the host behind it), or one for all.
///
/// # Panics
/// As [`boot_with_hosts`]; also an MTU out of range.
pub fn boot_with_host_mtus(append: &str, mtus: Option<Vec<u16>>) -> (TapNet, Guest, Hosts) {
    let mtus = mtus.map(|m| Mtus::new(m).expect("MTU in range"));
    let net = TapNet::create_with_mtu(2, 1, mtus.as_ref()).expect("tap namespace");
    let cfg = GuestConfig {
        image: image(),
        append: append.to_string(),
        backend: Backend::Tap,
        netns: Some(net.path()),
        mtu: mtus.clone(),
        ..GuestConfig::default()
    };
    let guest = Guest::boot(&cfg).expect("boot");
    guest.wait_ready(READY_TIMEOUT).expect("ready");
    let plans = plan_with_mtu(append, 2, mtus.as_ref()).expect("host plan");
    let hosts = Hosts::create(&net, &plans).expect("hosts");
    (net, guest, hosts)
}

/// [`boot_with_hosts`] with hosts of the caller's plan (`plans[i]` behind port `i`: its
/// address, gateway and MAC), for a mode whose addresses `harness::hosts::plan` does not know
/// (the NAT's inside and outside networks).
///
/// # Panics
/// As [`boot_with_hosts`].
pub fn boot_with_planned_hosts(append: &str, plans: &[HostPlan]) -> (TapNet, Guest, Hosts) {
    let net = TapNet::create_with_mtu(2, 1, None).expect("tap namespace");
    let cfg = GuestConfig {
        image: image(),
        append: append.to_string(),
        backend: Backend::Tap,
        netns: Some(net.path()),
        ..GuestConfig::default()
    };
    let guest = Guest::boot(&cfg).expect("boot");
    guest.wait_ready(READY_TIMEOUT).expect("ready");
    let hosts = Hosts::create(&net, plans).expect("hosts");
    (net, guest, hosts)
}

/// A finished command's status, stdout and stderr, for assertion messages.
pub fn out(o: &std::process::Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// iperf3 TCP for `secs` seconds from the host behind port 0 to the one behind port 1
/// (10.0.1.2; the server runs once, `-1`): its `-J` report.
///
/// # Panics
/// If the client fails (60 s timeout) or prints no JSON.
pub fn run_iperf3(hosts: &Hosts, secs: u32) -> serde_json::Value {
    run_iperf3_to(hosts, secs, "10.0.1.2")
}

/// [`run_iperf3`] to the host behind port 1 at `server` (its IPv4 or IPv6 address).
///
/// # Panics
/// As [`run_iperf3`].
pub fn run_iperf3_to(hosts: &Hosts, secs: u32, addr: &str) -> serde_json::Value {
    let mut server = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            hosts.namespace(1).expect("host behind port 1"),
        ])
        .args(["iperf3", "-s", "-1", "-B", addr])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("iperf3 server");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let t = secs.to_string();
    let o = hosts
        .exec(
            0,
            &[
                "timeout",
                "60",
                "iperf3",
                "-c",
                addr,
                "-t",
                &t,
                "--connect-timeout",
                "5000",
                "-J",
            ],
        )
        .expect("iperf3 client");
    let _ = server.kill();
    let _ = server.wait();
    assert!(o.status.success(), "iperf3: {}", out(&o));
    serde_json::from_slice(&o.stdout).expect("iperf3 -J output")
}
