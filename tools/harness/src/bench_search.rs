//! `bench --search`: boots a device under test ([`Dut`]: Gannet, the Linux peer, or testpmd
//! from the lab crate, `lab::search_dpdk`) on the
//! dgram backend, measures the generator's ceiling per row first, and runs [`crate::search`]
//! with a trial runner that attributes loss from the device's drop counters before and after
//! each trial (Gannet's STATS) (issue 42). Another peer, NIC or mode plugs in as a [`Dut`].

use crate::gen;
use crate::peer_linux::{self, LinuxPeer, PeerMode};
use crate::qemu::{self, Backend, Echo, Guest, GuestConfig};
use crate::rate::{self, Ceiling, Sizes, Trial};
use crate::search::{self, RowOutcome, RowResult, SearchConfig};
use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// RFC 2544 §9.1's frame sizes for Ethernet, bytes on the wire (FCS included).
pub const RFC2544_SIZES: [usize; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// How long a STATS request may take under load.
const STATS_TIMEOUT: Duration = Duration::from_secs(20);

/// The `--search` JSON result.
#[derive(Debug, Serialize)]
pub struct SearchReport {
    /// "gannet" (peers: their names).
    pub dut: String,
    /// The guest's kernel command line.
    pub append: String,
    /// "dgram": QEMU's unix-datagram backend, non-blocking sends.
    pub backend: &'static str,
    /// Direction, NIC, flows, FIB, cores and queues.
    pub dimensions: Dimensions,
    pub config: SearchConfig,
    /// `net.unix.max_dgram_qlen` QEMU's socket (and the ceiling's stand-in) were created
    /// with: datagrams queued before a send is refused (what [`Trial::refused`] counts);
    /// `None` if unreadable.
    pub host_dgram_qlen: Option<u64>,
    /// The host's own `net.unix.max_dgram_qlen` (put back once QEMU's socket existed).
    pub host_dgram_qlen_default: Option<u64>,
    /// The generator's ceiling per row, measured before the guest booted.
    pub ceilings: Vec<Ceiling>,
    pub rows: Vec<RowResult>,
    /// The same search against peer guests in the same run (`--search --peer linux`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<SearchReport>,
}

/// The dimensions of a search besides the frame size (issue 42 item 3), recorded in the report
/// and printed in every row's line ([`Dimensions::label`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dimensions {
    /// `"port0->port1"`: frames offered into port 0 only; `"both"` (`--bidir`): the same
    /// rate into each port at once, rates per direction, each trial's directions apart in
    /// its `directions`.
    pub direction: &'static str,
    /// The ports' NIC model (`--nic`): `virtio`, `e1000e`, or `mixed` (virtio-net on port 0,
    /// where frames enter; e1000e on port 1, where they leave).
    pub nic: String,
    /// UDP flows the offered frames cycle over (`--flows`): source ports
    /// `10000..10000+flows`, frame `i` on flow `i % flows`.
    pub flows: u16,
    /// Routes of the generated FIB the guest booted with (`--routes N`, router mode), all via
    /// 10.0.1.2; `None`: the command line's routes only (or a routes file, `routes_file`).
    pub fib_routes: Option<usize>,
    /// A routes file given by path (`--routes FILE`).
    pub routes_file: Option<String>,
    /// Where the offered frames go: `10.0.1.2`, or one address in each generated route in turn.
    pub destinations: String,
    /// The guest's vCPUs (1: `--cpus` above 1 is refused, see README).
    pub cpus: u32,
    /// Queue pairs per port (1: the dgram backend has one).
    pub queues: usize,
    /// The above in a few words, as every row's line shows it.
    pub label: String,
    /// The offered frames' flows and destinations.
    #[serde(skip)]
    pub offer: rate::Offer,
}

impl Default for Dimensions {
    fn default() -> Self {
        Dimensions::new(false, qemu::NicModel::Virtio, 1, None, None)
    }
}

impl Dimensions {
    /// One core, one queue per port; one direction or both (`bidir`), `nic`, `flows` flows,
    /// and the generated `fib` (frames into port 0 spread over its routes) or a routes
    /// file's path.
    pub fn new(
        bidir: bool,
        nic: qemu::NicModel,
        flows: u16,
        fib: Option<&crate::fib::Fib>,
        routes_file: Option<String>,
    ) -> Dimensions {
        let offer = rate::Offer {
            flows: flows.max(1),
            dsts: fib.map_or_else(|| vec![gen::peer_ip(1)], crate::fib::Fib::destinations),
        };
        let destinations = match fib {
            Some(f) => format!(
                "one address in each of the {} generated routes in turn (network + 1)",
                f.routes.len()
            ),
            None => "10.0.1.2".into(),
        };
        let destinations = if bidir {
            format!("{destinations} (into port 0); 10.0.0.2 (into port 1)")
        } else {
            destinations
        };
        let mut label = format!(
            "{}, {}, {} flow{}, 1 core x 1 queue",
            if bidir {
                "ports 0 <-> 1"
            } else {
                "port 0 -> 1"
            },
            nic.name(),
            offer.flows,
            if offer.flows == 1 { "" } else { "s" }
        );
        if let Some(f) = fib {
            let _ = write!(label, ", FIB of {} routes", f.routes.len());
        }
        if let Some(p) = &routes_file {
            let _ = write!(label, ", routes file {p}");
        }
        Dimensions {
            direction: if bidir { "both" } else { "port0->port1" },
            nic: nic.name().into(),
            flows: offer.flows,
            fib_routes: fib.map(|f| f.routes.len()),
            routes_file,
            destinations,
            cpus: 1,
            queues: 1,
            label,
            offer,
        }
    }
}

/// The rows `--sizes`/`--imix` ask for: `sizes` comma-separated (default RFC 2544's seven,
/// plus MTU + 18 when the MTU is over 1500), then the IMIX if `imix`.
///
/// # Errors
/// A size that is not a number or is outside 64..=MTU+18 (named), or the IMIX under an MTU
/// too small for its 1518 B frames.
pub fn rows(sizes: Option<&str>, imix: bool, mtu: u16) -> Result<Vec<Sizes>> {
    let max = usize::from(mtu) + 18;
    let mut list: Vec<usize> = match sizes {
        Some(s) => s
            .split(',')
            .map(|v| {
                v.trim()
                    .parse::<usize>()
                    .with_context(|| format!("--sizes: {v:?} is not a frame size in bytes"))
            })
            .collect::<Result<_>>()?,
        None => {
            let mut d = RFC2544_SIZES.to_vec();
            if max > 1518 {
                d.push(max);
            }
            d
        }
    };
    list.dedup();
    for &s in &list {
        if !(64..=max).contains(&s) {
            bail!(
                "--sizes: {s} B is outside 64..={max} (64 B to the MTU {mtu} + 18 B of Ethernet \
                 header and FCS); give --mtu for larger frames"
            );
        }
    }
    let mut rows: Vec<Sizes> = list.into_iter().map(Sizes::one).collect();
    if imix {
        if max < 1518 {
            bail!("--imix needs 1518 B frames: MTU {mtu} allows at most {max} B");
        }
        rows.push(Sizes::imix());
    }
    Ok(rows)
}

/// A device under test the search boots and drives through ports 0 and 1 of the dgram
/// backend: Gannet, a peer guest, or a new NIC or mode, each by an implementation of its own.
pub trait Dut {
    /// Its name in the report (`gannet`, `linux-l2`, …).
    fn name(&self) -> String;
    /// Its QEMU configuration with the ports' sockets in `dgram_dir`.
    fn guest_config(&self, dgram_dir: &Path) -> GuestConfig;
    /// Waits until it forwards.
    ///
    /// # Errors
    /// It does not get there in time, or says it failed.
    fn wait_ready(&self, guest: &Guest) -> Result<()>;
    /// Its drop counters by reason, read between trials; `None` if it has none to read.
    ///
    /// # Errors
    /// The counters cannot be read.
    fn drops(&self, _guest: &Guest) -> Result<Option<BTreeMap<String, u64>>> {
        Ok(None)
    }
    /// Shuts it down.
    ///
    /// # Errors
    /// It does not shut down cleanly.
    fn stop(&self, guest: &mut Guest) -> Result<()>;
}

/// Gannet, booted from this configuration.
pub struct Gannet(pub GuestConfig);

impl Dut for Gannet {
    fn name(&self) -> String {
        "gannet".into()
    }
    fn guest_config(&self, dgram_dir: &Path) -> GuestConfig {
        GuestConfig {
            dgram_dir: dgram_dir.to_path_buf(),
            cpus: 1,
            nics: 2,
            ..self.0.clone()
        }
    }
    fn wait_ready(&self, guest: &Guest) -> Result<()> {
        guest.wait_ready(qemu::READY_TIMEOUT)
    }
    fn drops(&self, guest: &Guest) -> Result<Option<BTreeMap<String, u64>>> {
        Ok(Some(guest.stats(STATS_TIMEOUT)?.drops()))
    }
    fn stop(&self, guest: &mut Guest) -> Result<()> {
        let (_, exit) = guest.quit(Duration::from_secs(30))?;
        ensure!(
            exit.is_clean(),
            "the guest exited {exit:?}\n{}",
            guest.tail_report()
        );
        Ok(())
    }
}

/// The Linux peer (`peer_linux`: Debian's kernel and busybox) bridging (`L2`) or
/// IPv4-forwarding (`L3`) the two ports, as `bench --peer linux` boots it. Its drops are not
/// read: its lost frames are counted as refused at the host or unattributed.
pub struct LinuxDut {
    /// The prepared kernel and initramfs.
    pub peer: LinuxPeer,
    /// Bridge or router.
    pub mode: PeerMode,
    /// Accelerator, `-cpu` and `--mtu` as Gannet's run.
    pub like: GuestConfig,
}

impl Dut for LinuxDut {
    fn name(&self) -> String {
        format!("linux-{}", self.mode.name())
    }
    fn guest_config(&self, dgram_dir: &Path) -> GuestConfig {
        let mut c = peer_linux::guest_config(
            &self.peer,
            dgram_dir,
            self.mode,
            self.like.accel,
            false,
            Echo::Off,
        );
        c.cpu = self.like.cpu.clone();
        c.mtu = self.like.mtu.clone();
        c
    }
    fn wait_ready(&self, guest: &Guest) -> Result<()> {
        peer_linux::wait_ready(guest).map(drop)
    }
    fn stop(&self, guest: &mut Guest) -> Result<()> {
        let _ = guest.send_line("quit");
        if guest.wait_exit(Duration::from_secs(20)).is_err() {
            eprintln!("search: warning: the Linux peer did not power off; killed");
            guest.kill();
        }
        Ok(())
    }
}

/// [`run`] on [`Gannet`] booted from `guest`.
///
/// # Errors
/// As [`run`].
pub fn run_gannet(
    guest: &GuestConfig,
    rows: &[Sizes],
    cfg: &SearchConfig,
    ceiling_seconds: f64,
    qlen: Option<u64>,
    dims: &Dimensions,
) -> Result<SearchReport> {
    run(
        &Gannet(guest.clone()),
        rows,
        cfg,
        ceiling_seconds,
        qlen,
        dims,
    )
}

/// Runs the search on `dut` (booted with its ports' sockets in a fresh directory), for every
/// row of `rows`. Prints each trial and row to
/// stderr. With `qlen`, `net.unix.max_dgram_qlen` is raised to it ([`rate::QlenGuard`]) from
/// the ceiling runs until QEMU is up, then put back: QEMU's socket keeps the deeper queue.
///
/// # Errors
/// `dut`'s configuration asks for `-icount` (rates in wall-clock time mean nothing under it)
/// or the tap backend; the ceiling cannot be measured; the guest does not boot or exits uncleanly.
pub fn run(
    dut: &dyn Dut,
    rows: &[Sizes],
    cfg: &SearchConfig,
    ceiling_seconds: f64,
    qlen: Option<u64>,
    dims: &Dimensions,
) -> Result<SearchReport> {
    let guest = dut.guest_config(Path::new("/tmp"));
    ensure!(
        !guest.icount,
        "--search measures rates in wall-clock time; -icount slows the guest's clock to its instruction count and makes every rate meaningless: drop --icount"
    );
    ensure!(
        guest.backend == Backend::Dgram,
        "--search runs on the dgram backend only (non-blocking sends into QEMU's unix datagram socket); drop --backend tap"
    );
    let qlen_default = rate::dgram_qlen();
    let guard = match qlen {
        Some(q) => match rate::QlenGuard::raise(q) {
            Ok(g) => Some(g),
            Err(e) => {
                eprintln!("search: warning: {e:#}: QEMU's socket keeps the host's queue of {qlen_default:?} frames");
                None
            }
        },
        None => None,
    };
    let qlen_used = rate::dgram_qlen();
    // The ceiling first, with nothing else of ours running.
    let mut ceilings = Vec::new();
    for r in rows {
        let c = rate::ceiling(r, ceiling_seconds)
            .with_context(|| format!("measuring the generator's ceiling at {}", r.label()))?;
        eprintln!(
            "search: generator ceiling at {}: {:.0} fps back through a host stand-in ({:.0} fps offered unpaced); host: {} cores, sender {}",
            r.label(), c.pps, c.offered_pps, c.host_cores, c.pinned
        );
        if let Some(m) = cfg.max_rate {
            if m > c.pps {
                eprintln!(
                    "search: --max-rate {m:.0} fps is above the generator's ceiling {:.0} fps at {}: searching up to the ceiling, not past it",
                    c.pps,
                    r.label()
                );
            }
        }
        ceilings.push(c);
    }
    let tmp = tempfile::Builder::new()
        .prefix("gannet-")
        .tempdir_in("/tmp")
        .context("creating the socket directory")?;
    let gcfg = dut.guest_config(tmp.path());
    let generator = gen::Generator::bind(&gen::GenConfig {
        dir: tmp.path().to_path_buf(),
        size: 64,
        ..Default::default()
    })?;
    // One way: the generator's port-0 socket sends, its port-1 socket receives. Both ways:
    // the generator's sockets receive, and a sender socket of its own per port sends (a
    // socket's non-blocking flag is shared by its sender and receiver).
    let (tx, rx) = (generator.socket(0)?, generator.socket(1)?);
    let back = if dims.direction == "both" {
        Some((
            rate::sender(tmp.path(), 0)?,
            rate::sender(tmp.path(), 1)?,
            generator.socket(0)?,
        ))
    } else {
        None
    };
    if let Some(q) = qlen_used {
        eprintln!("search: host: net.unix.max_dgram_qlen = {q} for QEMU's socket (host default {qlen_default:?}): it holds {q} frames; a send beyond that is refused and counted as dropped at the host");
    }
    let mut g = Guest::boot(&gcfg)?;
    dut.wait_ready(&g)?;
    drop(guard);
    eprintln!(
        "search: {} ready ({}); NDR (0 loss) and PDR (loss <= {} %) per row, resolution {} fps, search trials {} s, {} confirming trials of {} s",
        dut.name(),
        gcfg.accel.name(),
        cfg.pdr_loss * 100.0,
        cfg.resolution_pps,
        cfg.trial_seconds,
        cfg.repeats,
        cfg.final_seconds
    );
    let mut seq_base = 0u64;
    let guest_ref = &g;
    let mut run = |sizes: &Sizes, pps: f64, seconds: f64| -> Result<Trial> {
        let before = dut.drops(guest_ref)?;
        let mut t = match &back {
            Some((tx0, tx1, rx0)) => rate::trial_bidir(
                [tx0, tx1],
                [rx0, &rx],
                sizes,
                &dims.offer,
                pps,
                seconds,
                seq_base,
            )?,
            None => rate::trial_with(&tx, &rx, sizes, &dims.offer, pps, seconds, seq_base)?,
        };
        seq_base += t.offered + 1;
        let counted = before.is_some();
        if let (Some(before), Some(after)) = (before, dut.drops(guest_ref)?) {
            let grew = after
                .into_iter()
                .filter_map(|(k, v)| {
                    let d = v.saturating_sub(before.get(&k).copied().unwrap_or(0));
                    (d > 0).then_some((k, d))
                })
                .collect();
            t.attribute(grew);
        }
        eprintln!(
            "search:   {} at {:>9.0} fps for {} s: offered {} ({:.0} fps, pacing p99 {:.1} %, schedule slipped {} times by {:.1} ms), received {}, loss {:.3} % (refused at the host {}, guest {}, unattributed {})",
            sizes.label(),
            pps,
            seconds,
            t.offered,
            t.offered_pps,
            t.pacing_p99 * 100.0,
            t.slips,
            t.slip_ms,
            t.received,
            t.loss * 100.0,
            t.refused,
            if counted {
                t.guest_dropped.to_string()
            } else {
                "not read".into()
            },
            t.unattributed
        );
        if !t.directions.is_empty() {
            eprintln!("search:     {}", per_direction(&t));
        }
        Ok(t)
    };
    let mut results = Vec::new();
    for (r, c) in rows.iter().zip(&ceilings) {
        let res = search::search_row(cfg, r, c, &mut run)
            .with_context(|| format!("searching {}", r.label()))?;
        eprint!("{}", describe(&res, c, gcfg.accel.name(), &dims.label));
        results.push(res);
    }
    dut.stop(&mut g)?;
    Ok(SearchReport {
        dut: dut.name(),
        append: gcfg.append.clone(),
        backend: "dgram",
        dimensions: dims.clone(),
        config: cfg.clone(),
        host_dgram_qlen: qlen_used,
        host_dgram_qlen_default: qlen_default,
        ceilings,
        rows: results,
        peers: Vec::new(),
    })
}

/// Gannet's rows beside a peer's of the same run (`--search --peer`): per row, NDR and PDR of
/// each and Gannet's ÷ the peer's, and the p99 latency at 50 % of each one's NDR.
pub fn compare(gannet: &SearchReport, peer: &SearchReport) -> String {
    let mut s = String::new();
    let pps = |r: &Option<search::Rate>| r.as_ref().map_or(0.0, |x| x.pps);
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}x", a / b)
        } else {
            "-".into()
        }
    };
    let p99 = |r: &RowResult| {
        r.latency
            .iter()
            .find(|l| l.fraction == 0.5)
            .and_then(|l| l.trial.latency.as_ref())
            .map_or_else(|| "-".into(), |x| format!("{:.0} µs", x.p99_us))
    };
    for g in &gannet.rows {
        let Some(p) = peer.rows.iter().find(|p| p.sizes == g.sizes) else {
            continue;
        };
        let _ = writeln!(
            s,
            "search {} gannet vs {}: NDR {:.0} vs {:.0} fps ({}), PDR {:.0} vs {:.0} fps ({}), p99 at 50 % of NDR {} vs {}",
            g.sizes.label(),
            peer.dut,
            pps(&g.ndr),
            pps(&p.ndr),
            ratio(pps(&g.ndr), pps(&p.ndr)),
            pps(&g.pdr),
            pps(&p.pdr),
            ratio(pps(&g.pdr), pps(&p.pdr)),
            p99(g),
            p99(p)
        );
    }
    s
}

/// A bidirectional trial's directions in one line: each one's offered, received, loss,
/// refused and p99 latency.
pub fn per_direction(t: &Trial) -> String {
    t.directions
        .iter()
        .map(|d| {
            format!(
                "port {} -> {}: offered {}, received {}, loss {:.3} % (refused at the host {}), p99 {}",
                d.direction.unwrap_or(0),
                1 - d.direction.unwrap_or(0).min(1),
                d.offered,
                d.received,
                d.loss * 100.0,
                d.refused,
                d.latency
                    .as_ref()
                    .map_or_else(|| "-".into(), |l| format!("{:.1} µs", l.p99_us))
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The human-readable summary of one row; `dims` is [`Dimensions::label`].
pub fn describe(r: &RowResult, c: &Ceiling, accel: &str, dims: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "search {} [{dims}] ({accel}; generator ceiling {:.0} fps on {} host cores, sender {}): {}",
        r.sizes.label(),
        c.pps,
        c.host_cores,
        c.pinned,
        match r.outcome {
            RowOutcome::Found => "found",
            RowOutcome::CeilingReached =>
                "NDR at the generator's ceiling: the figure is the generator's, not the guest's",
            RowOutcome::NeverForwards =>
                "the guest forwarded nothing during the warm-up (never forwards)",
            RowOutcome::NotConfirmed => "no rate passed its confirming trials (not confirmed)",
        }
    );
    for (name, rate) in [("NDR", &r.ndr), ("PDR", &r.pdr)] {
        if let Some(x) = rate {
            let _ = writeln!(
                s,
                "  {name}: offered {:.0} fps ({:.4} Gbit/s on the wire), forwarded {:.0} fps ({:.4} Gbit/s), spread {:.0}..{:.0} fps, worst loss {:.3} %",
                x.pps,
                x.gbps,
                x.forwarded_pps,
                x.forwarded_gbps,
                x.spread_pps.0,
                x.spread_pps.1,
                x.worst_loss * 100.0
            );
        }
    }
    if !r.pdr_drops.is_empty() {
        let _ = writeln!(s, "  guest drops at PDR: {:?}", r.pdr_drops);
    }
    match &r.step_above {
        Some(t) => {
            let _ = writeln!(
                s,
                "  one step above NDR ({:.0} fps): loss {:.3} %",
                t.rate_pps,
                t.loss * 100.0
            );
        }
        None if r.ndr.is_some() => {
            let _ = writeln!(
                s,
                "  one step above NDR is past the search's upper bound (ceiling reached)"
            );
        }
        None => {}
    }
    for l in &r.latency {
        if let Some(x) = &l.trial.latency {
            let _ = writeln!(
                s,
                "  latency at {:.0} % of NDR ({:.0} fps, {} samples): min {:.1} µs, p50 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}",
                l.fraction * 100.0,
                l.trial.rate_pps,
                x.count,
                x.min_us,
                x.p50_us,
                x.p99_us,
                x.p999_us,
                x.max_us
            );
            if !l.trial.directions.is_empty() {
                let _ = writeln!(s, "    {}", per_direction(&l.trial));
            }
        }
    }
    let _ = writeln!(s, "  {} trials", r.trials.len());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rows_are_rfc2544s_and_the_jumbo_with_its_mtu() {
        let names = |v: Vec<Sizes>| v.into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(
            names(rows(None, false, 1500).unwrap()),
            ["64", "128", "256", "512", "1024", "1280", "1518"]
        );
        let j = names(rows(None, true, 9000).unwrap());
        assert_eq!(j[7..], ["9018", "imix"]);
    }

    /// One row each, NDR/PDR as given, no trials.
    fn report(dut: &str, ndr: f64, pdr: f64) -> SearchReport {
        let rate = |pps: f64| search::Rate {
            pps,
            gbps: 0.0,
            forwarded_pps: pps,
            forwarded_gbps: 0.0,
            spread_pps: (pps, pps),
            worst_loss: 0.0,
        };
        SearchReport {
            dut: dut.into(),
            append: String::new(),
            backend: "dgram",
            dimensions: Dimensions::default(),
            config: SearchConfig::default(),
            host_dgram_qlen: None,
            host_dgram_qlen_default: None,
            ceilings: Vec::new(),
            rows: vec![RowResult {
                sizes: Sizes::one(64),
                outcome: RowOutcome::Found,
                upper_pps: 1e5,
                ndr: Some(rate(ndr)),
                pdr: Some(rate(pdr)),
                pdr_drops: BTreeMap::new(),
                step_above: None,
                latency: Vec::new(),
                trials: Vec::new(),
            }],
            peers: Vec::new(),
        }
    }

    #[test]
    fn compare_gives_gannet_the_peer_and_the_ratio_per_row() {
        let s = compare(
            &report("gannet", 12_000.0, 15_000.0),
            &report("testpmd-mac", 8_000.0, 10_000.0),
        );
        assert_eq!(
            s.trim_end(),
            "search 64 B gannet vs testpmd-mac: NDR 12000 vs 8000 fps (1.50x), PDR 15000 vs 10000 fps (1.50x), p99 at 50 % of NDR - vs -"
        );
    }

    #[test]
    fn dimensions_label_and_offer_follow_the_flags() {
        let d = Dimensions::default();
        assert_eq!(d.label, "port 0 -> 1, virtio, 1 flow, 1 core x 1 queue");
        assert_eq!(d.offer, rate::Offer::default());
        assert_eq!(d.destinations, "10.0.1.2");
        let fib = crate::fib::Fib::generate(3, 7).unwrap();
        let d = Dimensions::new(false, qemu::NicModel::E1000e, 16, Some(&fib), None);
        assert_eq!(
            d.label,
            "port 0 -> 1, e1000e, 16 flows, 1 core x 1 queue, FIB of 3 routes"
        );
        assert_eq!(d.offer.flows, 16);
        assert_eq!(d.offer.dsts, fib.destinations());
        assert_eq!(d.fib_routes, Some(3));
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["nic"], "e1000e");
        assert_eq!(v["flows"], 16);
        assert_eq!(v["fib_routes"], 3);
        assert_eq!(v["direction"], "port0->port1");
        assert!(v.get("offer").is_none());
        let d = Dimensions::new(false, qemu::NicModel::Mixed, 0, None, Some("r.txt".into()));
        assert_eq!(
            d.label,
            "port 0 -> 1, mixed, 1 flow, 1 core x 1 queue, routes file r.txt"
        );
        let d = Dimensions::new(true, qemu::NicModel::Virtio, 2, None, None);
        assert_eq!(d.label, "ports 0 <-> 1, virtio, 2 flows, 1 core x 1 queue");
        assert_eq!(d.direction, "both");
        assert_eq!(
            d.destinations,
            "10.0.1.2 (into port 0); 10.0.0.2 (into port 1)"
        );
    }

    #[test]
    fn a_bidirectional_trial_prints_each_direction() {
        let leg = |d: usize, received: u64, refused: u64| Trial {
            direction: Some(d),
            offered: 100,
            received,
            refused,
            loss: (100 - received) as f64 / 100.0,
            ..Default::default()
        };
        let t = Trial {
            directions: vec![leg(0, 100, 0), leg(1, 90, 10)],
            ..Default::default()
        };
        assert_eq!(
            per_direction(&t),
            "port 0 -> 1: offered 100, received 100, loss 0.000 % (refused at the host 0), p99 -; \
             port 1 -> 0: offered 100, received 90, loss 10.000 % (refused at the host 10), p99 -"
        );
    }

    #[test]
    fn sizes_outside_64_to_mtu_plus_18_are_refused_by_name() {
        let e = rows(Some("64,1519"), false, 1500).unwrap_err().to_string();
        assert!(e.contains("1519 B is outside 64..=1518"), "{e}");
        let e = rows(Some("63"), false, 1500).unwrap_err().to_string();
        assert!(e.contains("63 B"), "{e}");
        assert!(rows(Some("9018"), false, 9000).is_ok());
        assert!(rows(Some("x"), false, 1500).is_err());
    }
}
