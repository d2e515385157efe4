//! A NIC's own view in `/metrics` (`gannet_nic_*`): the link and the device's counters of
//! `ports[].nic` (drivers that keep them: e1000e, igb), read off the hot path each time the
//! page is made. Ports without them (virtio-net) have no series.

use super::{counter, gauge, NicStats, PortStats};
use core::fmt;

/// The `gannet_nic_*` families for the ports of `ports` (one entry per port) that have NIC
/// counters; nothing when none has.
pub(super) fn write_prometheus_nic(ports: &[PortStats], w: &mut dyn fmt::Write) -> fmt::Result {
    let nics = || ports.iter().filter_map(|p| Some((p.port, p.nic?)));
    if nics().next().is_none() {
        return Ok(());
    }
    type NicGet = fn(&NicStats) -> u64;
    let gauges: [(&str, &str, NicGet); 2] = [
        (
            "gannet_nic_link_up",
            "1 if the port's link was up when last read (STATUS.LU), else 0.",
            |n| u64::from(n.link_up),
        ),
        (
            "gannet_nic_link_speed_mbps",
            "The link's speed when up (Mb/s, STATUS.SPEED); 0 while down.",
            |n| u64::from(n.link_speed_mbps),
        ),
    ];
    for (name, help, get) in gauges {
        gauge(w, name, help)?;
        for (port, n) in nics() {
            writeln!(w, "{name}{{port=\"{port}\"}} {}", get(&n))?;
        }
    }
    let counters: [(&str, &str, NicGet); 6] = [
        (
            "gannet_nic_link_changes_total",
            "Link state changes seen between reads.",
            |n| n.link_changes,
        ),
        (
            "gannet_nic_rx_errors_total",
            "Received descriptors with an error bit (dropped, in drops bad_desc too).",
            |n| n.rx_errors,
        ),
        (
            "gannet_nic_missed_total",
            "Frames the device missed for lack of FIFO room (MPC).",
            |n| n.missed,
        ),
        (
            "gannet_nic_crc_errors_total",
            "Frames received with a bad CRC (CRCERRS).",
            |n| n.crc_errors,
        ),
        (
            "gannet_nic_rx_no_buffers_total",
            "Times a frame arrived with no receive descriptor free (RNBC).",
            |n| n.rx_no_buffer,
        ),
        (
            "gannet_nic_mmio_reads_total",
            "Device register reads, set-up included (none per forwarded frame).",
            |n| n.mmio_reads,
        ),
    ];
    for (name, help, get) in counters {
        counter(w, name, help)?;
        for (port, n) in nics() {
            writeln!(w, "{name}{{port=\"{port}\"}} {}", get(&n))?;
        }
    }
    Ok(())
}
