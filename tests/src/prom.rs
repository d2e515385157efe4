//! Prometheus text exposition checks.

/// `promtool check metrics` (Debian's prometheus package, which `cargo xtask test` installs)
/// must accept `text` (a Prometheus body). Panics when promtool is missing, naming the package:
/// a check that passes without running would hide a bad exposition.
pub fn promtool_check(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: install Debian's prometheus package (cargo xtask test does)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics rejected:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
