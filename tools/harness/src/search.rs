//! The NDR/PDR search (RFC 2544 §26.1 throughput, ETSI GS NFV-TST 009's NDR and PDR) over an
//! open-loop trial runner (issue 42 item 3).
//!
//! **Method** (binary search, RFC 2544 §26.1 and NFV-TST 009 §12.3.3's "binary search with
//! loss verification"): for one row of frame sizes,
//! 1. warm-up ([`SearchConfig::warmup_seconds`] at [`WARMUP_PPS`]; RFC 2544 §23), which lets
//!    a router resolve its next hop's ARP; its results are discarded, except that a guest that
//!    forwarded none of it ends the row as [`RowOutcome::NeverForwards`];
//! 2. NDR: the highest rate with zero loss. A first trial at the upper bound (the generator's
//!    ceiling, or `--max-rate` if lower); if it loses, binary search between 0 and there with
//!    trials of [`SearchConfig::trial_seconds`], halving the interval until it is at most
//!    [`SearchConfig::resolution_pps`] wide;
//! 3. PDR: the same between NDR and the upper bound, passing a trial with loss at most
//!    [`SearchConfig::pdr_loss`];
//! 4. confirmation: [`SearchConfig::repeats`] trials of [`SearchConfig::final_seconds`] at NDR;
//!    if one loses, NDR is searched again (binary search from 0 to one resolution below the
//!    failed rate) and confirmed again (at most [`MAX_STEP_DOWNS`] times; longer trials meet
//!    rarer hiccups of a shared host), then the same at PDR with its criterion, searched again
//!    no lower than NDR (if nothing above NDR is confirmed, PDR is NDR, confirmed by NDR's
//!    lossless trials); the spread (min, max) of the confirming trials' forwarded rate is
//!    reported;
//! 5. one trial one resolution step above NDR (unless that is past the upper bound: "the
//!    ceiling reached" instead), expected to lose;
//! 6. latency: one final-length trial at 10 %, 50 % and 90 % of NDR (RFC 2544 §26.2 measures at
//!    the throughput rate; these are NFV-TST 009's lower loads).
//!
//! Every trial is kept, in order, in [`RowResult::trials`] with the phase that ran it. The
//! runner is a closure, so a peer guest or another NIC plugs in by giving its own.
//! Back-to-back frames (RFC 2544 §26.4) are not measured.

use std::collections::BTreeMap;

use anyhow::{ensure, Result};
use serde::Serialize;

use crate::rate::{Ceiling, Sizes, Trial};

/// Rate of the warm-up trial, frames/s.
pub const WARMUP_PPS: f64 = 1000.0;
/// How many times a failed confirmation may search NDR (or PDR) again below the failed rate.
pub const MAX_STEP_DOWNS: usize = 5;

/// What the search runs.
#[derive(Debug, Clone, Serialize)]
pub struct SearchConfig {
    /// Width the binary search narrows the interval to, frames/s.
    pub resolution_pps: f64,
    /// PDR's loss bound, a fraction (0.005: 0.5 %).
    pub pdr_loss: f64,
    /// Duration of a search trial, s.
    pub trial_seconds: f64,
    /// Duration of a confirming, step-above or latency trial, s.
    pub final_seconds: f64,
    /// Confirming trials at NDR and at PDR.
    pub repeats: usize,
    /// Duration of the warm-up, s.
    pub warmup_seconds: f64,
    /// An upper bound on offered rates below the generator's ceiling, frames/s.
    pub max_rate: Option<f64>,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            resolution_pps: 1000.0,
            pdr_loss: 0.005,
            trial_seconds: 1.0,
            final_seconds: 5.0,
            repeats: 3,
            warmup_seconds: 1.0,
            max_rate: None,
        }
    }
}

/// Which part of the search ran a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Warmup,
    Ndr,
    Pdr,
    ConfirmNdr,
    ConfirmPdr,
    StepAbove,
    Latency,
}

/// One trial of the search, with its phase and verdict.
#[derive(Debug, Clone, Serialize)]
pub struct SearchTrial {
    pub phase: Phase,
    /// Whether it met its phase's loss criterion (zero for NDR, `pdr_loss` for PDR).
    pub pass: bool,
    #[serde(flatten)]
    pub trial: Trial,
}

/// How a row ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowOutcome {
    /// NDR and PDR found and confirmed.
    Found,
    /// NDR is the upper bound: the guest lost nothing at the generator's ceiling (or
    /// `--max-rate`), so the figure is the generator's, not the guest's.
    CeilingReached,
    /// The guest forwarded no frame of the warm-up: nothing to search.
    NeverForwards,
    /// No rate passed its confirming trials (after every search again below a failure).
    NotConfirmed,
}

/// A rate with its forwarded rate's spread over the confirming trials.
#[derive(Debug, Clone, Serialize)]
pub struct Rate {
    /// Offered rate, frames/s.
    pub pps: f64,
    /// Offered rate on the wire (frame + 20 B), Gbit/s.
    pub gbps: f64,
    /// Forwarded rate, frames/s: mean of the confirming trials.
    pub forwarded_pps: f64,
    /// Forwarded rate on the wire, Gbit/s.
    pub forwarded_gbps: f64,
    /// Smallest and largest forwarded rate of the confirming trials, frames/s.
    pub spread_pps: (f64, f64),
    /// Largest loss of the confirming trials, a fraction.
    pub worst_loss: f64,
}

/// Latency at a fraction of NDR.
#[derive(Debug, Clone, Serialize)]
pub struct LoadLatency {
    /// The fraction of NDR offered (0.1, 0.5, 0.9).
    pub fraction: f64,
    /// The trial (its `latency` holds the percentiles).
    pub trial: Trial,
}

/// One row's result: a frame size (or the IMIX).
#[derive(Debug, Clone, Serialize)]
pub struct RowResult {
    pub sizes: Sizes,
    pub outcome: RowOutcome,
    /// The upper bound of the search, frames/s (the ceiling or `--max-rate`).
    pub upper_pps: f64,
    pub ndr: Option<Rate>,
    pub pdr: Option<Rate>,
    /// The guest's drop reasons during the confirming trials at PDR, summed.
    pub pdr_drops: BTreeMap<String, u64>,
    /// The trial one resolution above NDR; `None` when that is past the upper bound.
    pub step_above: Option<Trial>,
    pub latency: Vec<LoadLatency>,
    /// Every trial, in the order run.
    pub trials: Vec<SearchTrial>,
}

/// Runs a trial: `(sizes, rate frames/s, seconds) -> Trial`.
pub type Runner<'a> = dyn FnMut(&Sizes, f64, f64) -> Result<Trial> + 'a;

struct Row<'r, 'a> {
    cfg: &'r SearchConfig,
    sizes: &'r Sizes,
    run: &'r mut Runner<'a>,
    trials: Vec<SearchTrial>,
}

impl Row<'_, '_> {
    fn trial(&mut self, phase: Phase, pps: f64, seconds: f64, max_loss: f64) -> Result<Trial> {
        let t = (self.run)(self.sizes, pps, seconds)?;
        let pass = t.loss <= max_loss;
        self.trials.push(SearchTrial {
            phase,
            pass,
            trial: t.clone(),
        });
        Ok(t)
    }

    /// Binary search between `lo` (passes, or 0) and `hi` (fails) for the highest passing rate.
    fn bisect(&mut self, phase: Phase, mut lo: f64, mut hi: f64, max_loss: f64) -> Result<f64> {
        while hi - lo > self.cfg.resolution_pps {
            let mid = (lo + hi) / 2.0;
            let t = self.trial(phase, mid, self.cfg.trial_seconds, max_loss)?;
            if t.loss <= max_loss {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Confirms `pps` with `repeats` final trials. On a failure the rate is searched again
    /// between `floor` (a rate already confirmed, or 0) and one resolution below the failed
    /// one (binary search, search trials) and that is confirmed, at most [`MAX_STEP_DOWNS`]
    /// times. Returns the confirmed rate and its trials, or `None` when nothing above `floor`
    /// was confirmed.
    fn confirm(
        &mut self,
        phase: Phase,
        mut pps: f64,
        floor: f64,
        max_loss: f64,
    ) -> Result<Option<(f64, Vec<Trial>)>> {
        let search = if phase == Phase::ConfirmNdr {
            Phase::Ndr
        } else {
            Phase::Pdr
        };
        for _ in 0..=MAX_STEP_DOWNS {
            if pps <= floor {
                break;
            }
            let mut ok = Vec::new();
            for _ in 0..self.cfg.repeats {
                let t = self.trial(phase, pps, self.cfg.final_seconds, max_loss)?;
                if t.loss > max_loss {
                    break;
                }
                ok.push(t);
            }
            if ok.len() == self.cfg.repeats {
                return Ok(Some((pps, ok)));
            }
            pps = self.bisect(search, floor, pps - self.cfg.resolution_pps, max_loss)?;
        }
        Ok(None)
    }
}

fn rate(sizes: &Sizes, pps: f64, trials: &[Trial]) -> Option<Rate> {
    if trials.is_empty() {
        return None;
    }
    let fwd: Vec<f64> = trials.iter().map(|t| t.forwarded_pps).collect();
    let mean = fwd.iter().sum::<f64>() / fwd.len() as f64;
    Some(Rate {
        pps,
        gbps: sizes.gbps(pps),
        forwarded_pps: mean,
        forwarded_gbps: sizes.gbps(mean),
        spread_pps: (
            fwd.iter().copied().fold(f64::INFINITY, f64::min),
            fwd.iter().copied().fold(0.0, f64::max),
        ),
        worst_loss: trials.iter().map(|t| t.loss).fold(0.0, f64::max),
    })
}

/// Searches one row of `sizes` with `run`, bounded above by `ceiling` (and
/// [`SearchConfig::max_rate`]): the method in the module docs.
///
/// # Errors
/// A configuration out of range, or the runner's error.
pub fn search_row(
    cfg: &SearchConfig,
    sizes: &Sizes,
    ceiling: &Ceiling,
    run: &mut Runner<'_>,
) -> Result<RowResult> {
    ensure!(cfg.resolution_pps > 0.0, "resolution must be positive");
    ensure!(cfg.repeats >= 1, "at least one confirming trial");
    ensure!(
        (0.0..1.0).contains(&cfg.pdr_loss),
        "PDR loss bound {} not in [0, 1)",
        cfg.pdr_loss
    );
    let upper = cfg.max_rate.map_or(ceiling.pps, |m| m.min(ceiling.pps));
    let mut row = Row {
        cfg,
        sizes,
        run,
        trials: Vec::new(),
    };
    let warm = row.trial(
        Phase::Warmup,
        WARMUP_PPS.min(upper),
        cfg.warmup_seconds,
        1.0,
    )?;
    let mut result = RowResult {
        sizes: sizes.clone(),
        outcome: RowOutcome::NeverForwards,
        upper_pps: upper,
        ndr: None,
        pdr: None,
        pdr_drops: BTreeMap::new(),
        step_above: None,
        latency: Vec::new(),
        trials: Vec::new(),
    };
    if warm.received == 0 {
        result.trials = row.trials;
        return Ok(result);
    }
    // NDR.
    let top = row.trial(Phase::Ndr, upper, cfg.trial_seconds, 0.0)?;
    let ndr0 = if top.loss == 0.0 {
        upper
    } else {
        row.bisect(Phase::Ndr, 0.0, upper, 0.0)?
    };
    // PDR.
    let pdr0 = if ndr0 >= upper || top.loss <= cfg.pdr_loss {
        upper
    } else {
        row.bisect(Phase::Pdr, ndr0, upper, cfg.pdr_loss)?
    };
    let (ndr, ndr_trials) = row
        .confirm(Phase::ConfirmNdr, ndr0, 0.0, 0.0)?
        .unwrap_or((0.0, Vec::new()));
    // NDR's confirming trials lost nothing, so they confirm PDR at NDR too: PDR >= NDR.
    let (pdr, pdr_trials) = row
        .confirm(Phase::ConfirmPdr, pdr0.max(ndr), ndr, cfg.pdr_loss)?
        .unwrap_or_else(|| (ndr, ndr_trials.clone()));
    for t in &pdr_trials {
        for (k, v) in &t.guest_drops {
            *result.pdr_drops.entry(k.clone()).or_default() += v;
        }
    }
    result.ndr = rate(sizes, ndr, &ndr_trials);
    result.pdr = rate(sizes, pdr, &pdr_trials);
    result.outcome = if ndr <= 0.0 {
        RowOutcome::NotConfirmed
    } else if ndr >= upper {
        RowOutcome::CeilingReached
    } else {
        RowOutcome::Found
    };
    if ndr > 0.0 && ndr + cfg.resolution_pps <= upper {
        let t = row.trial(
            Phase::StepAbove,
            ndr + cfg.resolution_pps,
            cfg.final_seconds,
            0.0,
        )?;
        result.step_above = Some(t);
    }
    if ndr > 0.0 {
        for fraction in [0.1, 0.5, 0.9] {
            let t = row.trial(Phase::Latency, ndr * fraction, cfg.final_seconds, 0.0)?;
            result.latency.push(LoadLatency { fraction, trial: t });
        }
    }
    result.trials = row.trials;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceiling(pps: f64) -> Ceiling {
        Ceiling {
            pps,
            offered_pps: pps,
            host_cores: 2,
            pinned: "cpu 1".into(),
            sizes: "64".into(),
        }
    }

    /// A device that forwards up to `cap` frames/s and loses the excess.
    fn device(cap: f64) -> impl FnMut(&Sizes, f64, f64) -> Result<Trial> {
        move |_, pps, s| {
            let offered = (pps * s).round() as u64;
            let received = ((pps.min(cap)) * s).round() as u64;
            Ok(Trial {
                rate_pps: pps,
                seconds: s,
                offered,
                received,
                offered_pps: pps,
                forwarded_pps: received as f64 / s,
                loss: (offered - received) as f64 / offered.max(1) as f64,
                ..Default::default()
            })
        }
    }

    #[test]
    fn finds_the_capacity_within_one_resolution() {
        let cfg = SearchConfig::default();
        let r = search_row(
            &cfg,
            &Sizes::one(64),
            &ceiling(100_000.0),
            &mut device(42_345.0),
        )
        .unwrap();
        assert_eq!(r.outcome, RowOutcome::Found);
        let ndr = r.ndr.unwrap().pps;
        assert!(ndr <= 42_345.0 && ndr > 42_345.0 - 1000.0, "NDR {ndr}");
        // PDR: loss ≤ 0.5 % up to cap / 0.995 = 42 557.8.
        let pdr = r.pdr.unwrap().pps;
        assert!(
            pdr >= ndr && pdr <= 42_557.8 && pdr > 42_557.8 - 1000.0,
            "PDR {pdr}"
        );
        let above = r.step_above.unwrap();
        assert!(above.loss > 0.0);
        assert_eq!(r.latency.len(), 3);
        assert_eq!(r.latency[1].trial.rate_pps, ndr * 0.5);
        let confirms = r
            .trials
            .iter()
            .filter(|t| t.phase == Phase::ConfirmNdr)
            .count();
        assert_eq!(confirms, 3);
    }

    /// A device that loses 1 % of everything above its capacity: no rate above NDR meets a
    /// 0.5 % PDR, so PDR is NDR, confirmed by NDR's lossless trials.
    #[test]
    fn pdr_is_ndr_when_nothing_above_it_passes() {
        let mut cliff = |_: &Sizes, pps: f64, s: f64| -> Result<Trial> {
            let offered = (pps * s).round() as u64;
            let lost = if pps > 30_000.0 { offered / 100 } else { 0 };
            Ok(Trial {
                rate_pps: pps,
                offered,
                received: offered - lost,
                loss: lost as f64 / offered as f64,
                forwarded_pps: (offered - lost) as f64 / s,
                ..Default::default()
            })
        };
        let r = search_row(
            &SearchConfig::default(),
            &Sizes::one(64),
            &ceiling(100_000.0),
            &mut cliff,
        )
        .unwrap();
        let (ndr, pdr) = (r.ndr.unwrap(), r.pdr.unwrap());
        assert!(ndr.pps <= 30_000.0 && ndr.pps > 29_000.0, "NDR {}", ndr.pps);
        assert_eq!(pdr.pps, ndr.pps);
        assert_eq!(pdr.worst_loss, 0.0);
        assert!(!r.trials.iter().any(|t| t.phase == Phase::ConfirmPdr));
    }

    #[test]
    fn a_guest_faster_than_the_generator_ends_at_the_ceiling() {
        let r = search_row(
            &SearchConfig::default(),
            &Sizes::one(64),
            &ceiling(50_000.0),
            &mut device(1e9),
        )
        .unwrap();
        assert_eq!(r.outcome, RowOutcome::CeilingReached);
        assert_eq!(r.ndr.unwrap().pps, 50_000.0);
        assert!(r.step_above.is_none());
    }

    #[test]
    fn a_guest_that_never_forwards_is_named() {
        let r = search_row(
            &SearchConfig::default(),
            &Sizes::one(64),
            &ceiling(50_000.0),
            &mut device(0.0),
        )
        .unwrap();
        assert_eq!(r.outcome, RowOutcome::NeverForwards);
        assert_eq!(r.trials.len(), 1);
        assert!(r.ndr.is_none());
    }
}
