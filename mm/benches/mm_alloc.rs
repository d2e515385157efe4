//! Order-0 page allocator micro-benchmark (issue 3): cycles per page (TSC ticks, `rdtsc`) for
//! alloc, free and alloc+free at batch sizes 1, 2, 4, ... 16384, for
//!
//! * `single`: [`PerCpuPages::alloc_page`] / [`PerCpuPages::free_page`], one page per call;
//! * `bulk`: [`PerCpuPages::alloc_pages_bulk`] (array form), freed with `free_page` per slot
//!   (the page_pool pattern);
//! * `list`: [`PerCpuPages::alloc_pages_bulk_list`], freed with [`PerCpuPages::free_pages_bulk`];
//! * `buddy_system_allocator`: the order-0 path of that crate's `FrameAllocator`
//!   (`alloc(1)` / `dealloc(pfn, 1)`), a well-kept third-party frame allocator, as the baseline;
//!
//! all in one run, interleaved per repetition so machine noise hits every method alike; plus the
//! bulk and single paths on 2 threads pinned to 2 CPUs (each its own `PerCpuPages`, one shared
//! `Zone`) against 1 thread (`threads2_speedup`).
//!
//! Run it through `cargo xtask bench mm --json FILE` (which also draws `docs/mm-bench.png`), or
//! directly:
//!
//! ```text
//! cargo bench -p mm --bench mm_alloc -- [--json FILE] [--png FILE] [--reps N] [--quick]
//! ```
//!
//! Each figure is the *minimum over repetitions* of an average over >= 2^17 pages (the least
//! disturbed repetition; medians are in the JSON beside them, `*_median`). The zone is 1 GiB
//! (262,144 pages) and the pcp is sized like Linux for it on one CPU (batch 63, high 1286).
//! Alloc-only and free-only figures time each phase separately and subtract the cost of an empty
//! `rdtsc` pair, so at small batches they are noisier than the alloc+free total, which is timed
//! over whole loops.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use buddy_system_allocator::FrameAllocator;
use mm::{Page, PerCpuPages, Pfn, Zone};

const SIZES: [usize; 15] = [
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
];
/// 1 GiB of 4 KiB pages.
const ZONE_PAGES: u64 = 1 << 18;

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Method {
    Single,
    Bulk,
    List,
    Bsa,
}

const METHODS: [Method; 4] = [Method::Single, Method::Bulk, Method::List, Method::Bsa];

impl Method {
    fn key(self) -> &'static str {
        match self {
            Method::Single => "single",
            Method::Bulk => "bulk",
            Method::List => "list",
            Method::Bsa => "buddy_system_allocator",
        }
    }
}

#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

fn leak_zone(pages: u64) -> &'static Zone {
    let map: &'static [Page] = Box::leak((0..pages).map(|_| Page::new()).collect());
    let z: &'static Zone = Box::leak(Box::new(Zone::new(Pfn(0), map)));
    z.add_free_range(Pfn(0), Pfn(pages));
    z
}

struct Ctx {
    zone: &'static Zone,
    pcp: Box<PerCpuPages>,
    pfns: Vec<Pfn>,
    slots: Vec<Option<Pfn>>,
    bsa: FrameAllocator<32>,
    frames: Vec<usize>,
}

impl Ctx {
    fn new() -> Ctx {
        let zone = leak_zone(ZONE_PAGES);
        let pcp = Box::new(PerCpuPages::new(zone, 1));
        let mut bsa = FrameAllocator::<32>::new();
        bsa.add_frame(1, ZONE_PAGES as usize);
        let max = *SIZES.last().unwrap();
        Ctx {
            zone,
            pcp,
            pfns: vec![Pfn(0); max],
            slots: vec![None; max],
            bsa,
            frames: vec![0; max],
        }
    }

    #[inline(never)]
    fn alloc(&mut self, m: Method, b: usize) {
        let z = self.zone;
        match m {
            Method::Single => {
                for slot in &mut self.pfns[..b] {
                    *slot = self.pcp.alloc_page(z).expect("zone empty");
                }
            }
            Method::Bulk => {
                let slots = &mut self.slots[..b];
                let mut got = 0;
                while got < b {
                    let n = self.pcp.alloc_pages_bulk(z, slots).expect("bulk");
                    assert!(n > 0, "zone empty");
                    got += n;
                }
            }
            Method::List => {
                let mut got = 0;
                while got < b {
                    let n = self
                        .pcp
                        .alloc_pages_bulk_list(z, b - got, &mut self.pfns[got..b])
                        .expect("bulk");
                    assert!(n > 0, "zone empty");
                    got += n;
                }
            }
            Method::Bsa => {
                for f in &mut self.frames[..b] {
                    *f = self.bsa.alloc(1).expect("bsa empty");
                }
            }
        }
        black_box(&self.pfns);
        black_box(&self.slots);
        black_box(&self.frames);
    }

    #[inline(never)]
    fn free(&mut self, m: Method, b: usize) {
        let z = self.zone;
        match m {
            Method::Single => {
                for &p in &self.pfns[..b] {
                    self.pcp.free_page(z, p);
                }
            }
            Method::Bulk => {
                for s in &mut self.slots[..b] {
                    self.pcp.free_page(z, s.take().unwrap());
                }
            }
            Method::List => self.pcp.free_pages_bulk(z, &self.pfns[..b]),
            Method::Bsa => {
                for &f in &self.frames[..b] {
                    self.bsa.dealloc(f, 1);
                }
            }
        }
    }

    fn rounds(&self, b: usize, pages: usize) -> usize {
        (pages / b).max(4)
    }

    /// alloc+free cycles per page, timed over whole loops.
    fn total(&mut self, m: Method, b: usize, pages: usize) -> f64 {
        let rounds = self.rounds(b, pages);
        self.alloc(m, b);
        self.free(m, b);
        let t0 = rdtsc();
        for _ in 0..rounds {
            self.alloc(m, b);
            self.free(m, b);
        }
        let t1 = rdtsc();
        (t1 - t0) as f64 / (rounds * b) as f64
    }

    /// (alloc, free) cycles per page, each phase timed on its own, minus the empty-timer cost.
    fn split(&mut self, m: Method, b: usize, pages: usize, overhead: f64) -> (f64, f64) {
        let rounds = self.rounds(b, pages);
        let (mut a, mut f) = (0u64, 0u64);
        for _ in 0..rounds {
            let t0 = rdtsc();
            self.alloc(m, b);
            let t1 = rdtsc();
            self.free(m, b);
            let t2 = rdtsc();
            a += t1 - t0;
            f += t2 - t1;
        }
        let n = (rounds * b) as f64;
        let o = overhead * rounds as f64;
        (((a as f64 - o) / n).max(0.0), ((f as f64 - o) / n).max(0.0))
    }
}

/// Cost of an empty `rdtsc` pair (minimum of many).
fn timer_overhead() -> f64 {
    (0..10_000)
        .map(|_| {
            let t0 = rdtsc();
            let t1 = rdtsc();
            t1 - t0
        })
        .min()
        .unwrap() as f64
}

fn pin_to_cpu(cpu: usize) -> bool {
    // SAFETY: plain libc call on a zeroed cpu_set_t for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// `threads` threads, each pinned to its own CPU with its own pcp on one shared zone, each doing
/// `pages` pages of alloc+free at batch 64 (bulk array form, or the single path). Returns pages
/// per second over all threads.
fn threads_throughput(zone: &'static Zone, threads: usize, pages: usize, bulk: bool) -> f64 {
    const B: usize = 64;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|cpu| {
            let (barrier, done) = (barrier.clone(), done.clone());
            std::thread::spawn(move || {
                pin_to_cpu(cpu);
                let mut pcp = Box::new(PerCpuPages::new(zone, 2));
                let mut slots = [None; B];
                let mut pfns = [Pfn(0); B];
                let mut round = |pcp: &mut PerCpuPages| {
                    if bulk {
                        let mut got = 0;
                        while got < B {
                            got += pcp.alloc_pages_bulk(zone, &mut slots).unwrap();
                        }
                        black_box(&mut slots);
                        for s in &mut slots {
                            pcp.free_page(zone, s.take().unwrap());
                        }
                    } else {
                        for p in &mut pfns {
                            *p = pcp.alloc_page(zone).unwrap();
                        }
                        black_box(&mut pfns);
                        for &p in &pfns {
                            pcp.free_page(zone, p);
                        }
                    }
                };
                for _ in 0..1000 {
                    round(&mut pcp);
                }
                barrier.wait();
                let t0 = Instant::now();
                for _ in 0..pages / B {
                    round(&mut pcp);
                }
                let t1 = Instant::now();
                done.wait();
                pcp.drain_local_pages(zone);
                (t0, t1)
            })
        })
        .collect();
    barrier.wait();
    done.wait();
    // Wall time from the first thread's start to the last thread's end, measured by the workers
    // themselves (the main thread's wake-up latency stays out of it).
    let spans: Vec<(Instant, Instant)> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    let secs = (end - start).as_secs_f64();
    (threads * (pages / B) * B) as f64 / secs
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

type Table = BTreeMap<usize, f64>;

fn json_table(t: &Table) -> String {
    let body: Vec<String> = SIZES
        .iter()
        .map(|b| format!("\"{b}\": {:.2}", t[b]))
        .collect();
    format!("{{{}}}", body.join(", "))
}

struct Args {
    json: Option<PathBuf>,
    png: Option<PathBuf>,
    reps: usize,
    pages: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        json: None,
        png: None,
        reps: 7,
        pages: 1 << 17,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => a.json = it.next().map(PathBuf::from),
            "--png" => a.png = it.next().map(PathBuf::from),
            "--reps" => a.reps = it.next().and_then(|s| s.parse().ok()).unwrap_or(7).max(1),
            "--quick" => {
                a.reps = 2;
                a.pages = 1 << 14;
            }
            // `cargo bench` passes `--bench`; ignore it and anything else.
            _ => {}
        }
    }
    a
}

fn main() {
    let args = parse_args();
    pin_to_cpu(0);
    let overhead = timer_overhead();
    let mut ctx = Ctx::new();
    eprintln!(
        "mm_alloc: zone {} pages, pcp batch {} high {}, rdtsc pair {} cycles, {} reps x >= {} pages",
        ZONE_PAGES,
        ctx.pcp.batch(),
        ctx.pcp.high(),
        overhead,
        args.reps,
        args.pages
    );

    // [method][size] -> samples
    let mut total: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    let mut alloc: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    let mut free: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    for _ in 0..args.reps {
        for &b in &SIZES {
            for (mi, &m) in METHODS.iter().enumerate() {
                let t = ctx.total(m, b, args.pages);
                total.entry((mi, b)).or_default().push(t);
                let (a, f) = ctx.split(m, b, args.pages, overhead);
                alloc.entry((mi, b)).or_default().push(a);
                free.entry((mi, b)).or_default().push(f);
            }
        }
    }
    // Everything went back: the zone holds all pages but those on the pcp list.
    ctx.pcp.drain_local_pages(ctx.zone);
    assert_eq!(ctx.zone.free_pages(), ZONE_PAGES - 1, "bench leaked pages");

    let table = |src: &BTreeMap<(usize, usize), Vec<f64>>, mi: usize, f: fn(&[f64]) -> f64| {
        SIZES
            .iter()
            .map(|&b| (b, f(&src[&(mi, b)])))
            .collect::<Table>()
    };

    // Threads: same zone size, fresh zone, 1 vs 2 threads, interleaved.
    let tzone = leak_zone(ZONE_PAGES);
    let tpages = args.pages * 64;
    let (mut t1b, mut t2b, mut t1s, mut t2s) = (vec![], vec![], vec![], vec![]);
    for _ in 0..args.reps {
        t1b.push(threads_throughput(tzone, 1, tpages, true));
        t2b.push(threads_throughput(tzone, 2, tpages, true));
        t1s.push(threads_throughput(tzone, 1, tpages, false));
        t2s.push(threads_throughput(tzone, 2, tpages, false));
    }
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let speedup = max(&t2b) / max(&t1b);
    let speedup_median = median(&t2b) / median(&t1b);
    let speedup_single = max(&t2s) / max(&t1s);
    let speedup_single_median = median(&t2s) / median(&t1s);

    // Print the table.
    println!(
        "alloc+free cycles per page (min over {} reps; alloc / free beside)",
        args.reps
    );
    print!("{:>6}", "batch");
    for m in METHODS {
        print!(" | {:>26}", m.key());
    }
    println!();
    for &b in &SIZES {
        print!("{b:>6}");
        for (mi, _) in METHODS.iter().enumerate() {
            let cell = format!(
                "{:.1} ({:.1} / {:.1})",
                min(&total[&(mi, b)]),
                min(&alloc[&(mi, b)]),
                min(&free[&(mi, b)])
            );
            print!(" | {cell:>26}");
        }
        println!();
    }
    let at64 = |mi: usize| min(&total[&(mi, 64)]);
    println!(
        "batch 64: bulk {:.1}, single {:.1}, list {:.1}, buddy_system_allocator {:.1} cycles/page; \
         buddy_system_allocator / bulk = {:.1}x, / single = {:.1}x",
        at64(1),
        at64(0),
        at64(2),
        at64(3),
        at64(3) / at64(1),
        at64(3) / at64(0)
    );
    println!(
        "2 threads vs 1 (batch 64, pages/s, best of {}): bulk {:.2}x (median {:.2}x), single {:.2}x (median {:.2}x); 1 thread bulk {:.1} Mpages/s",
        args.reps,
        speedup,
        speedup_median,
        speedup_single,
        speedup_single_median,
        max(&t1b) / 1e6
    );

    if let Some(path) = &args.json {
        let mut fields = Vec::new();
        for (mi, m) in METHODS.iter().enumerate() {
            let k = m.key();
            fields.push(format!(
                "\"{k}_total_cycles\": {}",
                json_table(&table(&total, mi, min))
            ));
            fields.push(format!(
                "\"{k}_alloc_cycles\": {}",
                json_table(&table(&alloc, mi, min))
            ));
            fields.push(format!(
                "\"{k}_free_cycles\": {}",
                json_table(&table(&free, mi, min))
            ));
            fields.push(format!(
                "\"{k}_total_cycles_median\": {}",
                json_table(&table(&total, mi, median))
            ));
            fields.push(format!(
                "\"{k}_total_cycles_max\": {}",
                json_table(&table(&total, mi, max))
            ));
        }
        fields.push(format!("\"threads2_speedup\": {speedup:.3}"));
        fields.push(format!("\"threads2_speedup_median\": {speedup_median:.3}"));
        fields.push(format!("\"threads2_speedup_single\": {speedup_single:.3}"));
        fields.push(format!(
            "\"threads2_speedup_single_median\": {speedup_single_median:.3}"
        ));
        fields.push(format!("\"threads1_bulk_pages_per_sec\": {:.0}", max(&t1b)));
        fields.push(format!("\"threads2_bulk_pages_per_sec\": {:.0}", max(&t2b)));
        fields.push(format!("\"reps\": {}", args.reps));
        fields.push(format!("\"pages_per_sample\": {}", args.pages));
        fields.push(format!("\"rdtsc_overhead_cycles\": {overhead}"));
        fields.push(format!("\"zone_pages\": {ZONE_PAGES}"));
        fields.push(format!("\"pcp_batch\": {}", ctx.pcp.batch()));
        fields.push(format!("\"pcp_high\": {}", ctx.pcp.high()));
        let json = format!("{{\n  {}\n}}\n", fields.join(",\n  "));
        std::fs::write(path, json).expect("writing the JSON file");
        eprintln!("mm_alloc: wrote {}", path.display());
    }
    if let Some(path) = &args.png {
        let tables: Vec<(&str, Table)> = METHODS
            .iter()
            .enumerate()
            .map(|(mi, m)| (m.key(), table(&total, mi, min)))
            .collect();
        match plot(path, &tables) {
            Ok(text) => eprintln!(
                "mm_alloc: wrote {}{}",
                path.display(),
                if text {
                    ""
                } else {
                    " (no font found: lines only)"
                }
            ),
            Err(e) => eprintln!("mm_alloc: plot failed: {e}"),
        }
    }
}

const COLOURS: [plotters::style::RGBColor; 4] = [
    plotters::style::RGBColor(0xd6, 0x27, 0x28), // single: red
    plotters::style::RGBColor(0x1f, 0x77, 0xb4), // bulk: blue
    plotters::style::RGBColor(0x2c, 0xa0, 0x2c), // list: green
    plotters::style::RGBColor(0x7f, 0x7f, 0x7f), // buddy_system_allocator: grey
];

/// alloc+free cycles per page against log2(batch), one line per method. Returns whether labels
/// were drawn.
fn plot(
    path: &std::path::Path,
    tables: &[(&str, Table)],
) -> Result<bool, Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let text = plot::register_font();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let ymax = tables
        .iter()
        .flat_map(|(_, t)| t.values().copied())
        .fold(0.0, f64::max)
        * 1.1;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let xmax = (SIZES.len() - 1) as f64;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(15);
    if text {
        builder
            .caption(
                "mm: order-0 alloc+free, cycles per page vs batch size",
                ("sans-serif", 22),
            )
            .x_label_area_size(45)
            .y_label_area_size(60);
    }
    let mut chart = builder.build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    if text {
        chart
            .configure_mesh()
            .x_labels(SIZES.len())
            .x_label_formatter(&|x| format!("{}", 1u64 << (x.round() as u32)))
            .x_desc("batch size (pages)")
            .y_desc("TSC cycles per page")
            .label_style(("sans-serif", 14))
            .draw()?;
    } else {
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .draw()?;
    }
    for (i, (name, t)) in tables.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<(f64, f64)> = SIZES
            .iter()
            .enumerate()
            .map(|(xi, b)| (xi as f64, t[b]))
            .collect();
        let series = chart.draw_series(LineSeries::new(pts, colour.stroke_width(3)))?;
        if text {
            series.label(*name).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
            });
        }
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()?;
    }
    root.present()?;
    Ok(text)
}
