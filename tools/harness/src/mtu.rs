//! Port MTUs (`--mtu 9000` or `--mtu 9000,1500`): the values, their range and how they map
//! onto the guest's ports. A leaf: [`crate::qemu`] turns them into `host_mtu=` on each
//! `virtio-net-pci`, [`crate::tap`] into the taps' MTU, [`crate::hosts`] into the hosts'.

use std::fmt;

/// Smallest MTU `--mtu` accepts: IPv4's minimum (RFC 791: every host must take a 68-byte
/// datagram).
pub const MIN_MTU: u16 = 68;
/// Largest MTU `--mtu` accepts: a 9000-byte jumbo payload, a 9018-byte frame with header and
/// FCS (`gen::MAX_SIZE`).
pub const MAX_MTU: u16 = 9000;

/// Why an `--mtu` value was refused. Raised when the option is parsed and again by
/// `qemu::command_args`, so QEMU never starts with one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MtuError {
    /// A list element that is not a decimal number.
    NotANumber(String),
    /// A value outside [`MIN_MTU`]..=[`MAX_MTU`].
    OutOfRange(u32),
    /// An empty list (`--mtu ""`).
    Empty,
    /// As many values as neither 1, nor 2 (with an even number of ports), nor one per port.
    PortCount {
        /// Values given.
        values: usize,
        /// Ports the guest has (`--nics`).
        ports: usize,
    },
}

impl fmt::Display for MtuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MtuError::NotANumber(s) => write!(f, "MtuError: --mtu: {s:?} is not a number"),
            MtuError::OutOfRange(n) => write!(
                f,
                "MtuError: --mtu {n} out of range {MIN_MTU}..={MAX_MTU} (bytes of IP packet per frame)"
            ),
            MtuError::Empty => f.write_str("MtuError: --mtu is empty"),
            MtuError::PortCount { values, ports } => write!(
                f,
                "MtuError: --mtu gives {values} values for {ports} ports: give one (every port), two \
                 (ports 2k and 2k+1 of every pair) or one per port"
            ),
        }
    }
}

impl std::error::Error for MtuError {}

/// The MTU of every guest port (`--mtu 9000` or `--mtu 9000,1500`): QEMU's `host_mtu` on each
/// `virtio-net-pci` (VIRTIO_NET_F_MTU, the MTU the device offers the guest) and, on the tap
/// backend, the tap devices' MTU. The values repeat over the ports: one value is every port's,
/// two are ports 2k and 2k+1 of every port pair, otherwise one per port. Each is in
/// [`MIN_MTU`]..=[`MAX_MTU`] (checked on construction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mtus(Vec<u16>);

impl Mtus {
    /// The MTUs `values` (port 0, port 1, …).
    ///
    /// # Errors
    /// [`MtuError::Empty`] for no value, [`MtuError::OutOfRange`] for one outside
    /// [`MIN_MTU`]..=[`MAX_MTU`].
    pub fn new(values: Vec<u16>) -> std::result::Result<Mtus, MtuError> {
        if values.is_empty() {
            return Err(MtuError::Empty);
        }
        if let Some(&bad) = values.iter().find(|&&v| !(MIN_MTU..=MAX_MTU).contains(&v)) {
            return Err(MtuError::OutOfRange(bad.into()));
        }
        Ok(Mtus(values))
    }

    /// Parses `N` or `N,M,…` (the `--mtu` syntax; spaces around a value are allowed).
    ///
    /// # Errors
    /// See [`MtuError`]: a non-number, a value out of range, an empty list.
    pub fn parse(s: &str) -> std::result::Result<Mtus, MtuError> {
        if s.trim().is_empty() {
            return Err(MtuError::Empty);
        }
        let values = s
            .split(',')
            .map(|x| {
                let x = x.trim();
                let n: u32 = x.parse().map_err(|_| MtuError::NotANumber(x.to_string()))?;
                u16::try_from(n)
                    .ok()
                    .filter(|v| (MIN_MTU..=MAX_MTU).contains(v))
                    .ok_or(MtuError::OutOfRange(n))
            })
            .collect::<std::result::Result<Vec<u16>, MtuError>>()?;
        Mtus::new(values)
    }

    /// The values as given.
    pub fn values(&self) -> &[u16] {
        &self.0
    }

    /// Checks the number of values against `ports` guest ports: 1, 2 (with an even number of
    /// ports) or `ports`.
    ///
    /// # Errors
    /// [`MtuError::PortCount`].
    pub fn check_ports(&self, ports: usize) -> std::result::Result<(), MtuError> {
        let n = self.0.len();
        if n == 1 || n == ports || (n == 2 && ports.is_multiple_of(2)) {
            Ok(())
        } else {
            Err(MtuError::PortCount { values: n, ports })
        }
    }

    /// The MTU of guest port `port` (the values repeat over the ports).
    pub fn port(&self, port: usize) -> u16 {
        self.0[port % self.0.len()]
    }
}

impl fmt::Display for Mtus {
    /// The `--mtu` syntax: `9000,1500`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<String> = self.0.iter().map(u16::to_string).collect();
        f.write_str(&v.join(","))
    }
}

impl std::str::FromStr for Mtus {
    type Err = MtuError;
    fn from_str(s: &str) -> std::result::Result<Mtus, MtuError> {
        Mtus::parse(s)
    }
}
