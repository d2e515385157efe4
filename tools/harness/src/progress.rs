//! Progress for commands that run longer than ~10 s (`bench sim`, `bench boot`, `bench tlb`,
//! `bench --peer`, `soak`, `faults`, `fuzz`): on a terminal an `indicatif` bar, otherwise (CI,
//! a pipe, a log file) one status line every [`STATUS_EVERY`] — phase, done/total, elapsed —
//! from a ticker thread, so a step that takes minutes still says it is alive. Everything goes
//! to stderr: stdout stays free for tables or `--json -`.

use std::io::IsTerminal as _;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often the plain status line is printed when stderr is not a terminal.
pub const STATUS_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct State {
    phase: String,
    done: u64,
    stop: bool,
}

/// A command's progress: `total` steps of `what`, the current one named by its phase.
/// Dropping it stops the ticker (and clears the bar).
#[derive(Debug)]
pub struct Progress {
    what: String,
    total: u64,
    start: Instant,
    state: Arc<(Mutex<State>, Condvar)>,
    bar: Option<ProgressBar>,
    ticker: Option<JoinHandle<()>>,
}

impl Progress {
    /// Start showing `total` steps of `what` (e.g. `bench sim`, 6 runs), on a terminal as a
    /// bar, elsewhere as a line every [`STATUS_EVERY`].
    pub fn new(what: &str, total: u64) -> Self {
        Self::with_mode(what, total, std::io::stderr().is_terminal(), STATUS_EVERY)
    }

    /// [`Progress::new`] with the output chosen by the caller (`bar`: indicatif) and the plain
    /// line's period.
    pub fn with_mode(what: &str, total: u64, bar: bool, every: Duration) -> Self {
        let state = Arc::new((
            Mutex::new(State {
                phase: String::new(),
                done: 0,
                stop: false,
            }),
            Condvar::new(),
        ));
        let start = Instant::now();
        let (bar, ticker) = if bar {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            b.set_prefix(format!("xtask: {what}"));
            b.enable_steady_tick(Duration::from_millis(500));
            (Some(b), None)
        } else {
            let st = Arc::clone(&state);
            let what = what.to_string();
            let t = std::thread::spawn(move || {
                let (m, cv) = &*st;
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                // `stop` is checked before every wait: a drop that came before this thread
                // first locked must not leave it waiting a whole period.
                while !g.stop {
                    let (ng, timeout) =
                        cv.wait_timeout(g, every).unwrap_or_else(|e| e.into_inner());
                    g = ng;
                    if timeout.timed_out() && !g.stop {
                        eprintln!("{}", line(&what, &g.phase, g.done, total, start.elapsed()));
                    }
                }
            });
            (None, Some(t))
        };
        Progress {
            what: what.to_string(),
            total,
            start,
            state,
            bar,
            ticker,
        }
    }

    /// Name the step under way (`l2 K=32`, `mode io: clean phase`, …).
    pub fn phase(&self, phase: impl Into<String>) {
        let phase = phase.into();
        if let Some(b) = &self.bar {
            b.set_message(phase.clone());
        }
        self.state.0.lock().unwrap_or_else(|e| e.into_inner()).phase = phase;
    }

    /// `n` more steps done.
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
        self.state.0.lock().unwrap_or_else(|e| e.into_inner()).done += n;
    }

    /// The status line as the plain output prints it now.
    pub fn status(&self) -> String {
        let g = self.state.0.lock().unwrap_or_else(|e| e.into_inner());
        line(
            &self.what,
            &g.phase,
            g.done,
            self.total,
            self.start.elapsed(),
        )
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        {
            let (m, cv) = &*self.state;
            m.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            cv.notify_all();
        }
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

fn line(what: &str, phase: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let phase = if phase.is_empty() {
        String::new()
    } else {
        format!(", {phase}")
    };
    format!(
        "xtask: {what}: {done}/{total} done{phase}, {:.0} s elapsed",
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_phase_count_and_time() {
        let p = Progress::with_mode("bench sim", 6, false, Duration::from_secs(3600));
        assert_eq!(p.status(), "xtask: bench sim: 0/6 done, 0 s elapsed");
        p.phase("l2 K=32");
        p.inc(2);
        assert_eq!(
            p.status(),
            "xtask: bench sim: 2/6 done, l2 K=32, 0 s elapsed"
        );
    }

    #[test]
    fn drop_stops_the_ticker_at_once() {
        let t0 = Instant::now();
        let p = Progress::with_mode("x", 1, false, Duration::from_secs(3600));
        drop(p);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
