//! A minimal QMP client (QEMU Machine Protocol, `docs/interop/qmp-spec.rst` in QEMU: one JSON
//! object per line; a greeting, `qmp_capabilities`, then commands answered by `return` or
//! `error`, with asynchronous `event`s in between). Enough for the tests to press the ACPI
//! power button (`system_powerdown`), read why QEMU stopped (the `SHUTDOWN` event's
//! `reason`: `guest-shutdown` for S5, `guest-reset` for the reset register under `-no-reboot`)
//! and take a port's link down and up (`set_link`).
//! Every read is bounded by a timeout.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A QMP connection in command mode.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// Events read so far (oldest first), whether or not anyone waited for them.
    events: Vec<Value>,
}

/// The next JSON line from `r` before `deadline`: `Ok(None)` at end of stream (QEMU exited).
fn read_json(r: &mut BufReader<UnixStream>, deadline: Instant) -> Result<Option<Value>> {
    let mut line = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("QMP: no message before the deadline");
        }
        r.get_ref().set_read_timeout(Some(left))?;
        match r.read_line(&mut line) {
            Ok(0) => return Ok(None),
            Ok(_) if line.ends_with('\n') => {
                return serde_json::from_str(&line)
                    .map(Some)
                    .with_context(|| format!("QMP: not JSON: {line:?}"))
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e).context("QMP: reading"),
        }
    }
}

impl Qmp {
    /// Connects to QEMU's `-qmp unix:PATH,server=on,wait=off` socket (retrying until it
    /// exists, up to `timeout`), reads the greeting and enters command mode.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Qmp> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("QMP: connecting to {}", path.display()))
                }
            }
        };
        let writer = stream.try_clone()?;
        let mut q = Qmp {
            reader: BufReader::new(stream),
            writer,
            events: Vec::new(),
        };
        let greeting = read_json(&mut q.reader, deadline)?
            .ok_or_else(|| anyhow!("QMP: QEMU closed the socket before its greeting"))?;
        if greeting.get("QMP").is_none() {
            bail!("QMP: unexpected greeting {greeting}");
        }
        q.execute("qmp_capabilities", deadline - Instant::now())?;
        Ok(q)
    }

    /// Runs `command` (no arguments) and returns its `return` value; an `error` answer is an
    /// error naming QEMU's description. Events that arrive meanwhile are kept.
    pub fn execute(&mut self, command: &str, timeout: Duration) -> Result<Value> {
        self.send(command, json!({ "execute": command }), timeout)
    }

    /// [`Qmp::execute`] of `command` with `arguments` (a JSON object).
    pub fn execute_with(
        &mut self,
        command: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<Value> {
        self.send(
            command,
            json!({ "execute": command, "arguments": arguments }),
            timeout,
        )
    }

    /// `set_link`: the link of the NIC whose netdev is `name` (the harness names port `i`'s
    /// `p{i}`) down (`up` false: the guest's NIC sees no carrier, QEMU drops what it sends)
    /// or up again.
    pub fn set_link(&mut self, name: &str, up: bool, timeout: Duration) -> Result<()> {
        self.execute_with("set_link", json!({ "name": name, "up": up }), timeout)
            .map(|_| ())
    }

    fn send(&mut self, command: &str, msg: Value, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        writeln!(self.writer, "{msg}").with_context(|| format!("QMP: sending {command}"))?;
        loop {
            let msg = read_json(&mut self.reader, deadline)?
                .ok_or_else(|| anyhow!("QMP: QEMU exited before answering {command}"))?;
            if let Some(r) = msg.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = msg.get("error") {
                bail!("QMP: {command}: {e}");
            }
            self.events.push(msg);
        }
    }

    /// Waits up to `timeout` for event `name` (one already read counts) and returns it whole
    /// (`{"event": …, "data": …, "timestamp": …}`). QEMU exiting first is an error naming the
    /// events seen.
    pub fn wait_event(&mut self, name: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events.iter().find(|e| e["event"] == name) {
                return Ok(e.clone());
            }
            match read_json(&mut self.reader, deadline)? {
                Some(msg) => self.events.push(msg),
                None => bail!(
                    "QMP: QEMU exited without a {name} event (events: {:?})",
                    self.event_names()
                ),
            }
        }
    }

    /// The names of the events read so far, oldest first.
    pub fn event_names(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|e| e["event"].as_str().unwrap_or("?").to_string())
            .collect()
    }
}
