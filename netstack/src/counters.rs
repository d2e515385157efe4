//! Per-port counters, the way `ethtool -S` or testpmd's `show port stats` read: packets in and
//! out, and every drop under a named reason.

/// Why a frame was dropped. Every drop in the fast path is counted under exactly one reason.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum DropReason {
    /// The TX ring of the output port had no free descriptor.
    TxRingFull,
    /// The frame spanned more than one RX buffer (longer than a page minus the virtio header).
    TooBig,
    /// The device returned a buffer shorter than a virtio-net header or with a bad
    /// `num_buffers`.
    BadDesc,
    /// The frame is shorter than an Ethernet header (14 bytes).
    Runt,
    /// Counted on the egress port: the frame is longer than this port's MTU allows (the MTU,
    /// its 14-byte Ethernet header and 4 for an 802.1Q tag), so it was dropped before TX.
    /// Outside router mode, between ports of different MTUs: a frame the larger-MTU port
    /// received that cannot leave by the other (the router fragments instead).
    OverMtu,
    /// Counted on the egress port: its link is down (the NIC's link status, polled every
    /// 500 ms off the forwarding path), so the frame was dropped before TX rather than handed
    /// to a device that would lose it unseen.
    LinkDown,
}

impl DropReason {
    /// Every reason, in `STATS` order.
    pub const ALL: [DropReason; 6] = [
        DropReason::TxRingFull,
        DropReason::TooBig,
        DropReason::BadDesc,
        DropReason::Runt,
        DropReason::OverMtu,
        DropReason::LinkDown,
    ];

    /// The counter's name in `STATS`.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::TxRingFull => "tx_ring_full",
            DropReason::TooBig => "too_big",
            DropReason::BadDesc => "bad_desc",
            DropReason::Runt => "runt",
            DropReason::OverMtu => "over_mtu",
            DropReason::LinkDown => "link_down",
        }
    }
}

/// Counters of one port.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct PortCounters {
    /// Frames received (including those later dropped).
    pub rx: u64,
    /// Bytes received (frame bytes, no virtio header, no FCS).
    pub rx_bytes: u64,
    /// Frames queued for transmission on this port.
    pub tx: u64,
    /// Bytes queued for transmission.
    pub tx_bytes: u64,
    /// RX refills that found the page_pool (and allocator) empty: slots left unfilled. Not a
    /// frame drop by itself (DPDK's `rx_nombuf`). In router mode also the fragment trains
    /// dropped on this egress port for want of a page for every fragment (the router counts
    /// each as a routed frame `tx_dropped`).
    pub no_buffer: u64,
    /// Drops, indexed like [`DropReason::ALL`].
    pub drops: [u64; DropReason::ALL.len()],
}

impl PortCounters {
    /// Count one drop.
    #[inline]
    pub fn drop(&mut self, why: DropReason) {
        self.drops[why as usize] += 1;
    }

    /// Drops counted under `why`.
    pub fn drops_for(&self, why: DropReason) -> u64 {
        self.drops[why as usize]
    }

    /// All drops.
    pub fn drops_total(&self) -> u64 {
        self.drops.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_by_reason() {
        let mut c = PortCounters::default();
        c.drop(DropReason::TooBig);
        c.drop(DropReason::TooBig);
        c.drop(DropReason::TxRingFull);
        assert_eq!(c.drops_for(DropReason::TooBig), 2);
        assert_eq!(c.drops_for(DropReason::TxRingFull), 1);
        assert_eq!(c.drops_for(DropReason::Runt), 0);
        assert_eq!(c.drops_total(), 3);
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
