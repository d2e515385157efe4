//! The router's IPv6 counters in `STATS` (`router6`) and `/metrics` (`gannet_router6_*`):
//! [`crate::router::v6::Counters6`] summed over every core's `Router6`.

use crate::router::ipv6::Drop6;
use crate::router::v6::Counters6;
use core::fmt;
use serde::{Deserialize, Serialize};

/// The IPv6 router's counters (`router6`), summed over every core's router. Frames unless
/// noted. Every frame in `rx` ends in exactly one of `forwarded`, `tx_dropped`,
/// `echo_replies`, `nd_answered`, `nd_consumed`, `to_host` or a drop, or is still queued
/// (`queued_now`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Router6Stats {
    /// Frames of EtherType 0x86DD given to the router.
    pub rx: u64,
    /// Frames routed and handed to the egress port's TX ring (at once, or after Neighbor
    /// Discovery resolved the next hop).
    pub forwarded: u64,
    /// Frames routed that the egress port dropped before its TX ring (the port counts why).
    pub tx_dropped: u64,
    /// Echo requests to our addresses answered.
    pub echo_replies: u64,
    /// Neighbor Solicitations for our addresses answered with an advertisement.
    pub nd_answered: u64,
    /// Neighbor Discovery messages used (advertisements) or ignored (RS, RA, Redirect).
    pub nd_consumed: u64,
    /// Frames for our addresses a host would take (not echo, not ND): given to the
    /// management plane on its port (it has the port's IPv6 address), ended here on another.
    pub to_host: u64,
    /// Frames that entered a neighbour queue (counted again when they leave it).
    pub queued: u64,
    /// Gauge: frames in the neighbour queues now.
    pub queued_now: u64,
    /// ICMPv6 errors sent.
    pub icmp_sent: u64,
    /// ICMPv6 errors not sent because of the rate limit.
    pub icmp_rate_limited: u64,
    /// ICMPv6 errors RFC 4443 §2.4 (e) forbids.
    pub icmp_suppressed: u64,
    /// Answers or solicitations not built for want of a buffer.
    pub no_buffer: u64,
    /// Neighbor Solicitations sent.
    pub ns_sent: u64,
    /// Router Advertisements sent (`ra6=on`).
    #[serde(default)]
    pub ra_sent: u64,
    /// Frames dropped, by reason.
    pub drops: Router6Drops,
}

impl Router6Stats {
    /// The `router6` object from the summed counters and the frames queued now.
    pub fn new(c: &Counters6, queued_now: u64) -> Self {
        Router6Stats {
            rx: c.rx,
            forwarded: c.forwarded,
            tx_dropped: c.tx_dropped,
            echo_replies: c.echo_replies,
            nd_answered: c.nd_answered,
            nd_consumed: c.nd_consumed,
            to_host: c.to_host,
            queued: c.queued,
            queued_now,
            icmp_sent: c.icmp_sent,
            icmp_rate_limited: c.icmp_rate_limited,
            icmp_suppressed: c.icmp_suppressed,
            no_buffer: c.no_buffer,
            ns_sent: c.ns_sent,
            ra_sent: c.ra_sent,
            drops: Router6Drops::from(c),
        }
    }

    /// Frames that ended in an outcome (`rx` once nothing is queued).
    pub fn outcomes(&self) -> u64 {
        self.forwarded
            + self.tx_dropped
            + self.echo_replies
            + self.nd_answered
            + self.nd_consumed
            + self.to_host
            + self.drops.total()
    }
}

drop_table! {
    /// The IPv6 router's drops by [`Drop6`] (frames); the keys are [`Drop6::as_str`].
    Router6Drops: Drop6 from Counters6;
    ip_truncated: Truncated,
    bad_version: BadVersion,
    bad_payload_len: BadPayloadLen,
    loopback: Loopback,
    multicast_src: MulticastSrc,
    unspecified_src: UnspecifiedSrc,
    unspecified_dst: UnspecifiedDst,
    bad_multicast_scope: BadMulticastScope,
    multicast: Multicast,
    link_local_dst: LinkLocalDst,
    bad_hop_by_hop: BadHopByHop,
    option_discard: OptionDiscard,
    beyond_head: BeyondHead,
    runt: Runt,
    not_for_us: NotForUs,
    no_route: NoRoute,
    hop_limit: HopLimit,
    too_big: TooBig,
    beyond_scope: BeyondScope,
    param_problem: ParamProblem,
    bad_nd: BadNd,
    nd_not_for_us: NdNotForUs,
    neigh_table_full: NeighTableFull,
    neigh_queue_full: NeighQueueFull,
    neigh_timeout: NeighTimeout,
    bad_icmp: BadIcmp,
    neigh_flushed: NeighFlushed,
}

/// The `gannet_router6_*` metric families of `r` (Prometheus text format 0.0.4).
pub fn write_prometheus6(r: &Router6Stats, w: &mut dyn fmt::Write) -> fmt::Result {
    let family = |w: &mut dyn fmt::Write, name: &str, help: &str| {
        writeln!(w, "# HELP {name} {help}")?;
        writeln!(w, "# TYPE {name} counter")
    };
    family(
        w,
        "gannet_router6_frames_total",
        "IPv6 frames given to the router, and their outcomes other than drops.",
    )?;
    for (outcome, n) in [
        ("rx", r.rx),
        ("forwarded", r.forwarded),
        ("tx_dropped", r.tx_dropped),
        ("echo_replies", r.echo_replies),
        ("nd_answered", r.nd_answered),
        ("nd_consumed", r.nd_consumed),
        ("to_host", r.to_host),
    ] {
        writeln!(
            w,
            "gannet_router6_frames_total{{outcome=\"{outcome}\"}} {n}"
        )?;
    }
    family(w, "gannet_router6_icmp_sent_total", "ICMPv6 errors sent.")?;
    writeln!(w, "gannet_router6_icmp_sent_total {}", r.icmp_sent)?;
    family(
        w,
        "gannet_router6_solicitations_sent_total",
        "Neighbor Solicitations sent.",
    )?;
    writeln!(w, "gannet_router6_solicitations_sent_total {}", r.ns_sent)?;
    family(
        w,
        "gannet_router6_advertisements_sent_total",
        "Router Advertisements sent (ra6=on).",
    )?;
    writeln!(w, "gannet_router6_advertisements_sent_total {}", r.ra_sent)?;
    family(
        w,
        "gannet_router6_drops_total",
        "IPv6 frames the router dropped, by reason.",
    )?;
    for (why, n) in r.drops.iter() {
        writeln!(
            w,
            "gannet_router6_drops_total{{reason=\"{}\"}} {n}",
            why.as_str()
        )?;
    }
    Ok(())
}
