//! A port's MTU and the longest frame it receives: where the MTU comes from (`mtuN=`, the
//! device, Ethernet's default) and the RX frame limit every NIC is given from it
//! ([`Nic::set_rx_frame_limit`], issue 40: the MTU holds on every port).

use drivers::nic::Nic;
use netstack::Mode;

/// A port's IP MTU (bytes): `mtuN=` (`configured`), else the device's (`VIRTIO_NET_F_MTU`),
/// else Ethernet's 1500 (RFC 894). The router's egress limit and the management plane's frame
/// limit (MTU + 14) both follow it.
pub fn port_mtu(configured: Option<u16>, nic: &impl Nic) -> u16 {
    configured
        .or(nic.mtu())
        .unwrap_or(netstack::router::DEFAULT_MTU)
}

/// Where a port's MTU ([`port_mtu`]) came from, for the boot log.
pub fn port_mtu_source(configured: Option<u16>, nic: &impl Nic) -> &'static str {
    match (configured, nic.mtu()) {
        (Some(_), _) => "mtuN=",
        (None, Some(_)) => "the device's VIRTIO_NET_F_MTU",
        (None, None) => "Ethernet's default, RFC 894",
    }
}

/// The longest frame (bytes, no FCS) a port in `mode` receives with IP MTU `mtu`: the MTU, the
/// 14-byte Ethernet header, and 4 for an 802.1Q tag (IEEE 802.1Q §9.3) in the modes that pass
/// tagged frames through untouched (io, l2, acl); the router forwards untagged IPv4 only. Set
/// on every RX queue ([`Nic::set_rx_frame_limit`]): a longer frame is dropped and counted
/// `too_big` on its port before any mode sees it, so the router never forwards or fragments a
/// datagram that arrived over its ingress MTU. Outside router mode it is also the longest frame
/// a port sends (`Core::tx_cap`: longer ones count `over_mtu` on it).
pub fn rx_frame_limit(mtu: u16, mode: Mode) -> usize {
    let tag = if mode == Mode::Router { 0 } else { 4 };
    usize::from(mtu) + 14 + tag
}
