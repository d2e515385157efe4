//! The tap backend: QEMU's multi-queue `-netdev tap` in a network namespace of its own, and the
//! AF_PACKET sockets the generator uses on the tap devices.
//!
//! [`TapNet::create`] makes a uniquely named namespace (`gnt-PID-N`), turns IPv6 off in it (so the
//! host kernel sends no router solicitations or MLD reports into the guest), and creates one tap
//! device per guest port with `ip tuntap add dev gtapI mode tap multi_queue`, up. QEMU is started
//! inside the namespace (see [`crate::qemu::Guest::boot`]) and opens each tap once per queue
//! (`queues=N`). The namespace, and with it the taps, is deleted when the [`TapNet`] is dropped.
//!
//! Frames the host writes to a tap device (an AF_PACKET `send` on it) go to QEMU, i.e. into the
//! guest's RX; the kernel's tun driver picks the queue by flow hash (`tun_automq_select_queue`),
//! so only several flows spread over several queues. Frames the guest transmits arrive on the
//! tap device and an AF_PACKET socket bound to it receives them.
//!
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for namespaces) and `/dev/net/tun`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

/// The process id in a namespace name `gnt-PID-N`, if it is one of ours.
fn namespace_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("gnt-")?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<usize>().ok()?;
    pid.parse().ok()
}

/// Deletes the `gnt-PID-N` namespaces whose process is gone (a tool killed with SIGKILL cannot
/// run its Drop). Best effort: a namespace that cannot be deleted is left, with a warning.
fn remove_stale_namespaces() {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = namespace_owner(&name) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        match ip(&["netns", "del", &name]) {
            Ok(()) => eprintln!("xtask: removed namespace {name} left by process {pid} (gone)"),
            Err(e) => eprintln!("xtask: warning: stale namespace {name}: {e:#}"),
        }
    }
}

/// Where `ip netns add` puts a namespace's handle.
pub const NETNS_DIR: &str = "/var/run/netns";
/// The tun/tap control device.
pub const TUN_DEVICE: &str = "/dev/net/tun";
/// Most queue pairs per port QEMU is asked for (the guest's `queues=` takes 1..=4).
pub const MAX_QUEUES: usize = 4;

/// Receive buffer of the generator's AF_PACKET sockets (bytes, `SO_RCVBUFFORCE`): 16 MiB,
/// over a thousand jumbo frames at their truesize, well above any window the generator keeps.
const PACKET_RCVBUF: libc::c_int = 16 << 20;

/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, Linux 4.20): an AF_PACKET socket does not see
/// the frames sent out of its interface (including its own sends). Not in the `libc` crate.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Why the tap backend cannot be used here, in words a user can act on; `None` if it can.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some(format!(
            "the tap backend needs root (network namespaces, tap devices); running as uid {euid}"
        ));
    }
    if !Path::new(TUN_DEVICE).exists() {
        return Some(format!(
            "the tap backend needs {TUN_DEVICE} (modprobe tun, or a container with the device)"
        ));
    }
    None
}

/// Name of guest port `i`'s tap device inside the namespace.
pub fn tap_name(port: usize) -> String {
    format!("gtap{port}")
}

/// Adds a fresh, empty network namespace `gnt-PID-N` (removed as stale once this process is
/// gone) and returns its name. The caller deletes it (`ip netns del`).
///
/// # Errors
/// `ip netns add` failing.
pub fn add_namespace() -> Result<String> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = loop {
        let n = N.fetch_add(1, Ordering::SeqCst);
        let name = format!("gnt-{}-{n}", std::process::id());
        if !Path::new(NETNS_DIR).join(&name).exists() {
            break name;
        }
    };
    ip(&["netns", "add", &name])?;
    Ok(name)
}

/// Runs `ip ARGS`, failing with its stderr.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    ensure!(
        out.status.success(),
        "ip {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// A network namespace holding one multi-queue tap device per guest port; deleted on drop.
#[derive(Debug)]
pub struct TapNet {
    name: String,
    ports: usize,
    queues: usize,
    mtus: Option<crate::mtu::Mtus>,
}

impl TapNet {
    /// Creates a fresh namespace `gnt-PID-N` with `ports` tap devices `gtap0..` (multi_queue,
    /// up, IPv6 off) for `queues` queue pairs each.
    ///
    /// # Errors
    /// Not root or no `/dev/net/tun` ([`unavailable`]), `queues` outside 1..=[`MAX_QUEUES`], or
    /// an `ip`/`sysctl` command failing (its stderr is in the error). A namespace made before
    /// the failure is deleted.
    pub fn create(ports: usize, queues: usize) -> Result<TapNet> {
        TapNet::create_with_mtu(ports, queues, None)
    }

    /// [`TapNet::create`], and with `mtus` every tap's MTU set to its port's value
    /// (`ip link set dev gtapI mtu N`, before it goes up): QEMU does not touch a tap's MTU, and
    /// at the default 1500 the host's stack refuses to send a larger frame into the guest (an
    /// AF_PACKET send fails with `EMSGSIZE`). `None`: the kernel's default (1500).
    ///
    /// # Errors
    /// As [`TapNet::create`]; also `mtus` with a number of values that does not fit `ports`
    /// ([`crate::mtu::MtuError::PortCount`]).
    pub fn create_with_mtu(
        ports: usize,
        queues: usize,
        mtus: Option<&crate::mtu::Mtus>,
    ) -> Result<TapNet> {
        if let Some(m) = mtus {
            m.check_ports(ports)?;
        }
        if let Some(why) = unavailable() {
            bail!("{why}");
        }
        ensure!(
            (1..=MAX_QUEUES).contains(&queues),
            "--queues {queues}: give 1..={MAX_QUEUES}"
        );
        ensure!((1..=9).contains(&ports), "--nics {ports}: give 1..=9 ports");
        remove_stale_namespaces();
        let name = add_namespace()?;
        // From here on, Drop deletes the namespace whatever fails.
        let net = TapNet {
            name,
            ports,
            queues,
            mtus: mtus.cloned(),
        };
        net.populate()?;
        Ok(net)
    }

    fn populate(&self) -> Result<()> {
        let ns = self.name.as_str();
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "sysctl", "-qw"])
            .args([
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ])
            .output()
            .context("running sysctl in the namespace")?;
        ensure!(
            out.status.success(),
            "disabling IPv6 in namespace {ns} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        for i in 0..self.ports {
            let tap = tap_name(i);
            let mut args = vec!["-n", ns, "tuntap", "add", "dev", &tap, "mode", "tap"];
            if self.queues > 1 {
                args.push("multi_queue");
            }
            ip(&args)?;
            if let Some(m) = &self.mtus {
                ip(&[
                    "-n",
                    ns,
                    "link",
                    "set",
                    "dev",
                    &tap,
                    "mtu",
                    &m.port(i).to_string(),
                ])?;
            }
            ip(&["-n", ns, "link", "set", &tap, "up"])?;
        }
        Ok(())
    }

    /// The namespace's name (for `ip netns exec NAME …`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's handle, `/var/run/netns/NAME` (for `setns`).
    pub fn path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }

    /// Queue pairs per port.
    pub fn queues(&self) -> usize {
        self.queues
    }

    /// Number of tap devices (guest ports).
    pub fn ports(&self) -> usize {
        self.ports
    }

    /// The MTU tap `port` was given ([`TapNet::create_with_mtu`]); `None` for the kernel's
    /// default (1500).
    pub fn mtu(&self, port: usize) -> Option<u16> {
        self.mtus.as_ref().map(|m| m.port(port))
    }
}

impl Drop for TapNet {
    fn drop(&mut self) {
        // Deleting the namespace deletes the taps in it (once QEMU has closed them).
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("warning: removing network namespace {}: {e:#}", self.name);
        }
    }
}

/// Opens the namespace handle `netns` for `setns` (before a fork: `pre_exec` must not allocate).
pub fn open_netns(netns: &Path) -> Result<OwnedFd> {
    let c = CString::new(netns.as_os_str().as_encoded_bytes())
        .with_context(|| format!("namespace path {}", netns.display()))?;
    // SAFETY: a valid NUL-terminated path; the returned fd is owned below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("opening network namespace {}", netns.display()));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An AF_PACKET raw socket bound to one interface: `send` transmits a whole Ethernet frame (no
/// FCS) out of it, `recv` returns one frame that arrived on it (not its own sends).
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifname: String,
}

impl PacketSocket {
    /// Opens raw sockets bound to interfaces `ifnames` of network namespace `netns`: a helper
    /// thread enters the namespace (`setns`), opens and binds them, and ends; the sockets stay
    /// in that namespace.
    ///
    /// # Errors
    /// The namespace cannot be entered, an interface does not exist there, or socket/bind fails
    /// (needs CAP_NET_RAW).
    pub fn open_in(netns: &Path, ifnames: &[String]) -> Result<Vec<PacketSocket>> {
        let ns = open_netns(netns)?;
        let names = ifnames.to_vec();
        let path = netns.to_path_buf();
        std::thread::Builder::new()
            .name("gen-setns".into())
            .spawn(move || -> Result<Vec<PacketSocket>> {
                // SAFETY: setns on this thread only (a fresh thread that ends right after).
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(io::Error::last_os_error())
                        .with_context(|| format!("entering network namespace {}", path.display()));
                }
                names.iter().map(|n| PacketSocket::open(n)).collect()
            })
            .context("spawning the setns thread")?
            .join()
            .map_err(|_| anyhow::anyhow!("the setns thread panicked"))?
    }

    /// Opens a raw socket bound to interface `ifname` of the calling thread's namespace.
    fn open(ifname: &str) -> Result<PacketSocket> {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2) call; the fd is owned right below.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error()).context("socket(AF_PACKET, SOCK_RAW)");
        }
        // SAFETY: fresh descriptor, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = CString::new(ifname).context("interface name")?;
        // SAFETY: valid NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) };
        ensure!(ifindex != 0, "no interface {ifname} in this namespace");
        let one: libc::c_int = 1;
        // SAFETY: valid fd, option value is a c_int of the right size. Failure (kernel < 4.20)
        // is not fatal: our own sends would then come back to us, which the caller sees as
        // frames from the wrong direction.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        // A receive buffer for a window of jumbo frames: the default (~208 KiB of
        // `rmem_default`, charged per frame at its truesize, ~12 KiB for a 9,014-byte frame)
        // holds ~17 of them, and a burst the guest sends while the generator thread is
        // descheduled was dropped on the host (47 of 105,702 frames at --size 9018).
        // SO_RCVBUFFORCE (root, which the tap backend needs anyway) goes past `rmem_max`.
        let rcvbuf: libc::c_int = PACKET_RCVBUF;
        // SAFETY: valid fd, option value is a c_int of the right size. Failure only leaves the
        // default buffer.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&rcvbuf as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        // SAFETY: an all-zero sockaddr_ll is valid; the fields are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: valid fd and a sockaddr_ll of the stated size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error()).with_context(|| format!("binding to {ifname}"));
        }
        Ok(PacketSocket {
            fd,
            ifname: ifname.to_string(),
        })
    }

    /// The MTU of the interface the socket is bound to (`SIOCGIFMTU`, in the socket's
    /// namespace): the largest IP packet a `send` may carry, i.e. frames of at most MTU + 14
    /// bytes (a larger one fails with `EMSGSIZE`).
    ///
    /// # Errors
    /// The ioctl failing (the interface is gone, say).
    pub fn mtu(&self) -> Result<u32> {
        // SAFETY: an all-zero ifreq is valid; the name is set below.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        let name = self.ifname.as_bytes();
        ensure!(
            name.len() < req.ifr_name.len(),
            "interface name {} too long",
            self.ifname
        );
        for (d, &b) in req.ifr_name.iter_mut().zip(name) {
            *d = b as libc::c_char;
        }
        // SAFETY: valid fd and a properly sized ifreq, which SIOCGIFMTU fills in.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
        if r != 0 {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("SIOCGIFMTU on {}", self.ifname));
        }
        // SAFETY: SIOCGIFMTU wrote the ifru_mtu member of the union.
        let mtu = unsafe { req.ifr_ifru.ifru_mtu };
        u32::try_from(mtu).with_context(|| format!("{}: MTU {mtu}", self.ifname))
    }

    /// Another handle on the same socket.
    pub fn try_clone(&self) -> io::Result<PacketSocket> {
        Ok(PacketSocket {
            fd: self.fd.try_clone()?,
            ifname: self.ifname.clone(),
        })
    }

    /// Transmits one frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: valid fd and buffer.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Receives one frame (blocking, subject to the read timeout).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: valid fd and buffer.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn set_timeout(&self, opt: libc::c_int, t: Option<Duration>) -> io::Result<()> {
        let t = t.unwrap_or_default();
        let tv = libc::timeval {
            tv_sec: t.as_secs() as libc::time_t,
            tv_usec: t.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: valid fd and a timeval of the stated size.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `SO_RCVTIMEO` (`None`: block forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_timeout(libc::SO_RCVTIMEO, t)
    }

    /// `SO_SNDTIMEO` (`None`: block forever).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_timeout(libc::SO_SNDTIMEO, t)
    }

    /// `O_NONBLOCK` on or off.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        // SAFETY: fcntl on a valid fd.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_owner_parses_only_our_names() {
        assert_eq!(namespace_owner("gnt-1234-0"), Some(1234));
        assert_eq!(namespace_owner("gnt-1234-x"), None);
        assert_eq!(namespace_owner("other-1234-0"), None);
        assert_eq!(namespace_owner("gnt-abc-0"), None);
    }
}
