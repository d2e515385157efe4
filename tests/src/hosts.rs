//! Helpers for the tests with Linux hosts behind the ports (`tools::hosts`): a command's
//! output for assertion messages, and one iperf3 TCP run between the two hosts.

use tools::hosts::Hosts;

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
    let mut server = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            hosts.namespace(1).expect("host behind port 1"),
        ])
        .args(["iperf3", "-s", "-1", "-B", "10.0.1.2"])
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
                "10.0.1.2",
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
