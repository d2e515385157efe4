//! `tlbtest=N`: the TLB shootdown torture test (issue 13, item 5), run instead of forwarding.
//!
//! [`SLOTS`] pages of the vmap area are mapped read-only on every CPU. Each slot's frame holds
//! one tag, `(slot, round)`, and the slot's sequence word `SEQ[slot]` is `2 × round` while the
//! mapping is stable (a seqlock). CPU 0 runs `N` batches; each batch, for every slot in it,
//! takes a new frame, writes the next tag in it, makes the sequence odd, points the PTE at the
//! new frame and adds the page to its `FlushBatch` with the old frame to free; then one
//! shootdown to every CPU ([`crate::tlb::flush`]: `tlb=batch`) — or one per page
//! (`tlb=immediate`) — and only after every acknowledgement the old frames are poisoned and
//! freed to the zone (where later batches take them again) and the sequences made even.
//! Batch sizes cycle: 15 batches of [`SMALL_BATCH`] pages (at most `tlb_ceiling`: one `invlpg`
//! per page) then one of all [`SLOTS`] pages (a full flush).
//!
//! Every other CPU reads every slot in a loop with interrupts off, servicing flush requests
//! between passes (a busy poll-mode core). A sample is taken when the sequence was even before
//! the read and moved by at most one after it; it must then hold the tag of that round or the
//! next. Anything else (a poisoned or reused frame) is a **stale read**: a TLB entry that
//! outlived the shootdown. TCG keeps each vCPU's TLB until that vCPU flushes, so with
//! `tlbtest_skip=on` (targets acknowledge without flushing: the negative control) stale reads
//! must appear; with it off there must be none.
//!
//! Ends with one line (`wait_p50_ns`/`wait_p99_ns`: one shootdown from dispatch to the last
//! acknowledgement, frees included, in quarter powers of two), then the free-page check, and
//! exits with success only if every frame is back and (without `tlbtest_skip`) nothing was
//! stale:
//!
//! ```text
//! TLBTEST tlb=batch skip=off cpus=2 batches=… pages=… samples=… stale=… requests=… ipis=… requests_per_1000_pages_per_target=… invlpg=… full_flushes=… wait_p50_ns=… wait_p99_ns=…
//! ```

use crate::arch::time::{rdtsc, tsc_to_ns, Deadline};
use crate::mem::paging::{self, PAGE};
use crate::mem::vmap::{self, VmArea};
use crate::percpu::{online, MAX_CPUS};
use crate::{fail, println, smp, tlb};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use mm::tlb::{CpuMask, FlushBatch};
use mm::{Pfn, Zone};
use netstack::{Config, TlbMode};

/// Pages the readers read and CPU 0 remaps.
pub const SLOTS: usize = 512;
/// Pages in most batches: below the default ceiling (33), so flushed page by page.
pub const SMALL_BATCH: usize = 8;
/// Every this many batches, one covers all [`SLOTS`] (above any ceiling: a full flush).
const FULL_EVERY: u64 = 16;
/// High 16 bits of a tag; a poisoned (freed) frame holds [`POISON`] instead.
const TAG_MAGIC: u64 = 0x7a65 << 48;
/// Written into a frame before it goes back to the zone.
const POISON: u64 = 0xdead_dead_dead_dead;
/// Readers must be up within this long (ms).
const READER_START_MS: u64 = 2000;

static SEQ: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static AREA: spin::Once<VmArea> = spin::Once::new();
static DONE: AtomicBool = AtomicBool::new(false);
static READERS_UP: AtomicUsize = AtomicUsize::new(0);
static READERS_DONE: AtomicUsize = AtomicUsize::new(0);
static SAMPLES: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static STALE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

fn tag(slot: usize, round: u64) -> u64 {
    TAG_MAGIC | ((slot as u64) << 32) | (round & 0xffff_ffff)
}

fn write_frame(pfn: Pfn, value: u64) {
    // SAFETY: `pfn` is a frame this test owns (fresh from the zone or about to go back to it),
    // identity-mapped; no one else writes it.
    unsafe { (pfn.addr() as *mut u64).write_volatile(value) };
}

/// Wait-time histogram: bucket `i` holds waits of `2^(i/4) .. 2^((i+1)/4)` ns (quarter powers
/// of two, so a percentile is exact to within 19%).
struct Histogram([u64; 256]);

impl Histogram {
    fn add(&mut self, ns: u64) {
        let ns = ns.max(1);
        let log2 = 63 - u64::from(ns.leading_zeros());
        let frac = if log2 >= 2 { (ns >> (log2 - 2)) & 3 } else { 0 };
        self.0[((log2 * 4 + frac) as usize).min(255)] += 1;
    }
    /// Upper bound (ns) of the bucket holding the `per_mille`-th sample.
    fn percentile(&self, per_mille: u64) -> u64 {
        let total: u64 = self.0.iter().sum();
        let want = (total * per_mille).div_ceil(1000).max(1);
        let mut seen = 0;
        for (i, &n) in self.0.iter().enumerate() {
            seen += n;
            if seen >= want {
                let (log2, frac) = ((i / 4) as u32, (i % 4) as u64);
                return (1u64 << log2) + ((1u64 << log2) >> 2) * (frac + 1);
            }
        }
        0
    }
}

/// Boot CPU: run the torture test of `cfg.tlbtest` batches, print the result, then exit QEMU
/// (success only if no page leaked and, without `tlbtest_skip`, nothing stale was read).
pub fn run(cfg: &Config, zone: &'static Zone) -> ! {
    let cpus = online();
    if cpus < 2 {
        fail(format_args!(
            "tlbtest: needs at least 2 CPUs (QEMU -smp 2; `cargo xtask … --cpus 2`)"
        ));
    }
    paging_selftest(zone);
    let free_at_start = zone.free_pages();
    let area = *AREA
        .call_once(|| vmap::alloc_va(SLOTS).unwrap_or_else(|e| fail(format_args!("tlbtest: {e}"))));
    for s in 0..SLOTS {
        let f = alloc_frame(zone);
        write_frame(f, tag(s, 0));
        if let Err(e) = paging::vmap_page(area.page_addr(s), f.addr(), false) {
            fail(format_args!("tlbtest: {e}"));
        }
    }
    tlb::SHOOTDOWN
        .skip_remote_flush
        .store(cfg.tlbtest_skip, Ordering::Relaxed);
    smp::register_ap_entry(reader);
    for k in 1..cpus {
        smp::start_ap_work(k);
    }
    let deadline = Deadline::after_ms(READER_START_MS);
    while READERS_UP.load(Ordering::Acquire) < cpus - 1 {
        if deadline.expired() {
            fail(format_args!("tlbtest: readers did not start"));
        }
        core::hint::spin_loop();
    }
    let batches = cfg.tlbtest.unwrap_or(0);
    println!(
        "tlbtest: {batches} batches over {SLOTS} pages, {} readers, tlb={} ceiling={} skip={}",
        cpus - 1,
        cfg.tlb.as_str(),
        tlb::SHOOTDOWN.ceiling(),
        if cfg.tlbtest_skip { "on" } else { "off" }
    );
    let before = tlb_totals(cpus);
    let (pages, hist) = remap_batches(cfg, zone, area, CpuMask::first(cpus), batches);
    let after = tlb_totals(cpus);
    DONE.store(true, Ordering::Release);
    while READERS_DONE.load(Ordering::Acquire) < cpus - 1 {
        core::hint::spin_loop();
    }
    teardown(zone, area, CpuMask::first(cpus));
    report(cfg, cpus, batches, pages, &hist, before, after);
    let free_ok = zone.free_pages() == free_at_start;
    println!(
        "TLBTEST free pages at end {} (at start {free_at_start})",
        zone.free_pages()
    );
    let stale: u64 = STALE.iter().map(|s| s.load(Ordering::Relaxed)).sum();
    let ok = free_ok && (cfg.tlbtest_skip || stale == 0);
    crate::arch::exit::exit(if ok {
        crate::arch::exit::ExitCode::Success
    } else {
        crate::arch::exit::ExitCode::Failure
    })
}

/// Pages of the `vmalloc` self-test: more than one `rmqueue_bulk` chunk (64).
const SELFTEST_PAGES: usize = 300;

/// Before the torture: check the paging primitives the later users (the sparse FIB, the page
/// guard) build on, on this CPU alone. `vmalloc` a range, write each page's index through the
/// vmap address and read it back through the identity map of the frame its PTE names, free it
/// with a local-only shootdown (no other CPU touched it) and check every page came back; split
/// the 2 MiB identity page of a fresh frame, unmap that 4 KiB page and map it again.
fn paging_selftest(zone: &Zone) {
    let free0 = zone.free_pages();
    let area = vmap::vmalloc(zone, (SELFTEST_PAGES as u64) * PAGE)
        .unwrap_or_else(|e| fail(format_args!("tlbtest: self-test: {e}")));
    for i in 0..area.pages {
        // SAFETY: page `i` of a fresh vmalloc area: mapped writable, ours alone.
        unsafe { (area.page_addr(i) as *mut u64).write_volatile(i as u64 ^ TAG_MAGIC) };
    }
    for i in 0..area.pages {
        let pa = paging::vmap_translate(area.page_addr(i))
            .unwrap_or_else(|| fail(format_args!("tlbtest: self-test: page {i} not mapped")));
        // SAFETY: the frame behind page `i`, identity-mapped; only this CPU uses it.
        let v = unsafe { (pa as *const u64).read_volatile() };
        if v != i as u64 ^ TAG_MAGIC {
            fail(format_args!(
                "tlbtest: self-test: vmalloc page {i} reads {v:#x} through its frame"
            ));
        }
    }
    let mut batch: FlushBatch<SELFTEST_PAGES> = FlushBatch::new();
    let me = crate::percpu::current_cpu() as usize;
    vmap::vunmap(area, |v, pfn| {
        batch.add_page(v, CpuMask::only(me));
        let _ = batch.add_free(pfn);
    });
    let _ = batch.add_va_range(area.base, area.pages);
    tlb::flush(
        &mut batch,
        |pfn| zone.free_pages_order(pfn, 0),
        |base, pages| vmap::release_va(VmArea { base, pages }),
    );
    if zone.free_pages() != free0 || vmap::free_va_pages() != vmap::VMAP_PAGES {
        fail(format_args!(
            "tlbtest: self-test: vmalloc/vfree lost pages ({} free, {free0} before)",
            zone.free_pages()
        ));
    }
    let f = alloc_frame(zone);
    let split = paging::split_identity_2m(f.addr(), || crate::mem::alloc_table(zone));
    let guard = split.and_then(|()| paging::set_identity_present(f.addr(), false));
    x86_64::instructions::tlb::flush(x86_64::VirtAddr::new(f.addr()));
    let back = guard.and_then(|_| paging::set_identity_present(f.addr(), true));
    if !matches!(back, Ok(false)) {
        fail(format_args!(
            "tlbtest: self-test: split/unmap/map of {:#x}: {back:?}",
            f.addr()
        ));
    }
    x86_64::instructions::tlb::flush(x86_64::VirtAddr::new(f.addr()));
    // vmap of an existing frame: the same bytes at a second address.
    write_frame(f, tag(7, 7));
    let alias =
        vmap::vmap(&[f], false).unwrap_or_else(|e| fail(format_args!("tlbtest: self-test: {e}")));
    // SAFETY: the alias maps `f`, a frame this function owns, read-only.
    let seen = unsafe { (alias.base as *const u64).read_volatile() };
    vmap::vunmap(alias, |v, _| {
        x86_64::instructions::tlb::flush(x86_64::VirtAddr::new(v));
    });
    vmap::release_va(alias);
    if seen != tag(7, 7) {
        fail(format_args!(
            "tlbtest: self-test: vmap alias reads {seen:#x}"
        ));
    }
    kmap_selftest(zone);
    write_frame(f, POISON);
    zone.free_pages_order(f, 0);
    println!("tlbtest: self-test ok: vmalloc/vunmap of {SELFTEST_PAGES} pages, vmap alias, 2 MiB split and 4 KiB unmap/map, per-core views");
}

/// Per-core views: three frames in this CPU's window read back linearly; a second view while
/// one is alive is refused; after the drop the window maps other frames (local flush only).
fn kmap_selftest(zone: &Zone) {
    use crate::mem::kmap::{KmapError, LocalView};
    let frames: [Pfn; 3] = core::array::from_fn(|_| alloc_frame(zone));
    for round in 0..2u64 {
        for (i, &f) in frames.iter().enumerate() {
            write_frame(f, tag(i, round));
        }
        let order: [Pfn; 3] = if round == 0 {
            frames
        } else {
            [frames[2], frames[1], frames[0]]
        };
        let view = LocalView::map(&order)
            .unwrap_or_else(|e| fail(format_args!("tlbtest: self-test: kmap: {e:?}")));
        if !matches!(LocalView::map(&order), Err(KmapError::Busy)) {
            fail(format_args!(
                "tlbtest: self-test: a second view was not refused"
            ));
        }
        for (i, &f) in order.iter().enumerate() {
            let want = frames.iter().position(|&g| g == f).unwrap_or(0);
            let off = i * PAGE as usize;
            let got = u64::from_ne_bytes(view.bytes()[off..off + 8].try_into().unwrap_or([0; 8]));
            if got != tag(want, round) {
                fail(format_args!(
                    "tlbtest: self-test: kmap page {i} reads {got:#x} (round {round})"
                ));
            }
        }
    }
    for f in frames {
        zone.free_pages_order(f, 0);
    }
}

fn alloc_frame(zone: &Zone) -> Pfn {
    zone.alloc_pages(0)
        .unwrap_or_else(|| fail(format_args!("tlbtest: out of memory")))
}

/// CPU 0's part: `batches` batches; returns the pages remapped and the histogram of shootdown
/// times.
fn remap_batches(
    cfg: &Config,
    zone: &Zone,
    area: VmArea,
    mask: CpuMask,
    batches: u32,
) -> (u64, Histogram) {
    let mut batch: FlushBatch<SLOTS> = FlushBatch::new();
    let mut round = [0u64; SLOTS];
    let mut hist = Histogram([0; 256]);
    let mut pages = 0u64;
    let free = |pfn: Pfn| {
        write_frame(pfn, POISON);
        zone.free_pages_order(pfn, 0);
    };
    for b in 0..u64::from(batches) {
        let (start, n) = if b % FULL_EVERY == FULL_EVERY - 1 {
            (0, SLOTS)
        } else {
            ((b as usize * SMALL_BATCH) % SLOTS, SMALL_BATCH)
        };
        for s in start..start + n {
            let v = area.page_addr(s);
            let new = alloc_frame(zone);
            write_frame(new, tag(s, round[s] + 1));
            SEQ[s].store(2 * round[s] + 1, Ordering::Release);
            let old = paging::vmap_replace(v, new.addr(), false)
                .unwrap_or_else(|e| fail(format_args!("tlbtest: {e}")));
            batch.add_page(v, mask);
            let _ = batch.add_free(Pfn::from_addr(old));
            if cfg.tlb == TlbMode::Immediate {
                timed_flush(&mut batch, &mut hist, free);
            }
        }
        if !batch.is_empty() {
            timed_flush(&mut batch, &mut hist, free);
        }
        for s in start..start + n {
            round[s] += 1;
            SEQ[s].store(2 * round[s], Ordering::Release);
        }
        pages += n as u64;
    }
    (pages, hist)
}

/// One shootdown of `batch`, its dispatch-to-last-acknowledgement time (and the frees) in
/// `hist`.
fn timed_flush(batch: &mut FlushBatch<SLOTS>, hist: &mut Histogram, free: impl FnMut(Pfn)) {
    let t0 = rdtsc();
    tlb::flush(batch, free, |_, _| {});
    hist.add(tsc_to_ns(rdtsc() - t0));
}

/// Unmap every slot (one batched shootdown), free the frames, give the range back.
fn teardown(zone: &Zone, area: VmArea, mask: CpuMask) {
    let mut batch: FlushBatch<SLOTS> = FlushBatch::new();
    vmap::vunmap(area, |v, pfn| {
        batch.add_page(v, mask);
        let _ = batch.add_free(pfn);
    });
    let _ = batch.add_va_range(area.base, area.pages);
    tlb::flush(
        &mut batch,
        |pfn| zone.free_pages_order(pfn, 0),
        |base, pages| vmap::release_va(VmArea { base, pages }),
    );
}

/// Sum of every CPU's counters: (requests posted, IPIs, invlpg pages, full flushes).
fn tlb_totals(cpus: usize) -> [u64; 4] {
    let mut t = [0; 4];
    for c in 0..cpus {
        let s = tlb::stats(c);
        t[0] += s.poll_requests;
        t[1] += s.ipis_sent;
        t[2] += s.invlpg_pages;
        t[3] += s.full_flushes;
    }
    t
}

fn report(
    cfg: &Config,
    cpus: usize,
    batches: u32,
    pages: u64,
    hist: &Histogram,
    before: [u64; 4],
    after: [u64; 4],
) {
    let d: [u64; 4] = core::array::from_fn(|i| after[i] - before[i]);
    let samples: u64 = SAMPLES.iter().map(|s| s.load(Ordering::Relaxed)).sum();
    let stale: u64 = STALE.iter().map(|s| s.load(Ordering::Relaxed)).sum();
    let targets = (cpus - 1) as u64;
    // Requests a target saw: one poll-word post each (an IPI after the deadline is for a
    // request already posted, counted separately).
    let per_1000 = (d[0] * 1000 * 100)
        .checked_div(pages * targets)
        .unwrap_or(0);
    println!(
        "TLBTEST tlb={} skip={} cpus={cpus} batches={batches} pages={pages} samples={samples} stale={stale} requests={} ipis={} requests_per_1000_pages_per_target={}.{:02} invlpg={} full_flushes={} wait_p50_ns={} wait_p99_ns={}",
        cfg.tlb.as_str(),
        if cfg.tlbtest_skip { "on" } else { "off" },
        d[0],
        d[1],
        per_1000 / 100,
        per_1000 % 100,
        d[2],
        d[3],
        hist.percentile(500),
        hist.percentile(990),
    );
}

/// A reader CPU (registered AP entry): read every slot until CPU 0 is done, then halt with
/// interrupts on (flush requests of the teardown come as IPIs).
fn reader(cpu: usize) -> ! {
    let area = *AREA.get().expect("set before readers start");
    READERS_UP.fetch_add(1, Ordering::AcqRel);
    let (mut samples, mut stale) = (0u64, 0u64);
    while !DONE.load(Ordering::Acquire) {
        for (s, seq) in SEQ.iter().enumerate() {
            let s1 = seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                continue;
            }
            // SAFETY: the slot's page is mapped (read-only) for the whole test: CPU 0 only ever
            // replaces its frame, never unmaps it, until every reader is done.
            let v = unsafe { ((area.base + s as u64 * PAGE) as *const u64).read_volatile() };
            let s2 = seq.load(Ordering::Acquire);
            if s2 > s1 + 1 {
                continue;
            }
            samples += 1;
            let r = s1 / 2;
            if v != tag(s, r) && v != tag(s, r + 1) {
                stale += 1;
            }
        }
        tlb::service();
    }
    SAMPLES[cpu].store(samples, Ordering::Relaxed);
    STALE[cpu].store(stale, Ordering::Relaxed);
    READERS_DONE.fetch_add(1, Ordering::AcqRel);
    loop {
        tlb::set_halted(true);
        if tlb::halt_allowed() {
            x86_64::instructions::interrupts::enable_and_hlt();
            x86_64::instructions::interrupts::disable();
        }
        tlb::set_halted(false);
        tlb::service();
    }
}
