//! Host tests of the 82574L bring-up on a scripted register file: the MAC from `RAL0`/`RAH0` or
//! the EEPROM, the named errors (reset, EEPROM, link), the filter and unit words, the `MTA`
//! hash.

use super::*;
use crate::ddnic::{RCTL, RDLEN, RDT, TCTL, TDT};
use crate::nic::Nic;
use crate::sim::HostHal;

extern crate std;
use std::boxed::Box;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::vec::Vec;

/// How the scripted NIC behaves.
#[derive(Clone, Copy)]
struct Script {
    /// `CTRL.RST` clears itself.
    reset_clears: bool,
    /// `RAH0.AV` at reset (else the MAC comes from the EEPROM).
    ral_valid: bool,
    /// `EERD.DONE` is ever set.
    eeprom_answers: bool,
    /// `STATUS.LU`.
    link: bool,
}

const OK: Script = Script {
    reset_clears: true,
    ral_valid: true,
    eeprom_answers: true,
    link: true,
};

const MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x07];
const EEPROM_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// A register file with the few side effects the bring-up relies on; every access logged.
#[derive(Clone)]
struct Fake {
    regs: Rc<RefCell<HashMap<usize, u32>>>,
    log: Rc<RefCell<Vec<(bool, usize, u32)>>>,
    script: Script,
}

impl Fake {
    fn new(script: Script) -> Fake {
        let mut m = HashMap::new();
        if script.ral_valid {
            m.insert(RAL0, u32::from_le_bytes([MAC[0], MAC[1], MAC[2], MAC[3]]));
            m.insert(RAH0, u32::from_le_bytes([MAC[4], MAC[5], 0, 0]) | RAH_AV);
        }
        Fake {
            regs: Rc::new(RefCell::new(m)),
            log: Rc::new(RefCell::new(Vec::new())),
            script,
        }
    }
    fn get(&self, reg: usize) -> u32 {
        *self.regs.borrow().get(&reg).unwrap_or(&0)
    }
    fn writes_to(&self, reg: usize) -> Vec<u32> {
        self.log
            .borrow()
            .iter()
            .filter(|(w, r, _)| *w && *r == reg)
            .map(|&(_, _, v)| v)
            .collect()
    }
    fn reads(&self) -> usize {
        self.log.borrow().iter().filter(|(w, _, _)| !w).count()
    }
}

impl DdRegs for Fake {
    fn read(&self, reg: usize) -> u32 {
        let v = match reg {
            STATUS => {
                if self.script.link {
                    STATUS_LU
                } else {
                    0
                }
            }
            _ => self.get(reg),
        };
        self.log.borrow_mut().push((false, reg, v));
        v
    }
    fn write(&self, reg: usize, val: u32) {
        self.log.borrow_mut().push((true, reg, val));
        let mut v = val;
        if reg == CTRL && self.script.reset_clears {
            v &= !CTRL_RST;
        }
        if reg == EERD && val & EERD_START != 0 && self.script.eeprom_answers {
            let word = (val >> 2) as usize & 0x3FFF;
            let data = match word {
                0..=2 => u16::from_le_bytes([EEPROM_MAC[2 * word], EEPROM_MAC[2 * word + 1]]),
                _ => 0xFFFF,
            };
            v = u32::from(data) << 16 | (word as u32) << 2 | EERD_DONE;
        }
        self.regs.borrow_mut().insert(reg, v);
    }
}

/// A clock that moves 100 µs per reading.
fn clock() -> impl Fn() -> u64 {
    let t = core::cell::Cell::new(0u64);
    move || {
        t.set(t.get() + 100);
        t.get()
    }
}

const L2: E1000eConfig = E1000eConfig {
    filter: RxFilter::Promiscuous,
    max_frame: 1514,
    multicast: [None; MAX_MULTICAST],
    link_local_group: false,
};

#[test]
fn brings_up_with_the_mac_from_ral_and_the_units_for_l2() {
    let f = Fake::new(OK);
    let nic = bring_up::<HostHal, _>(f.clone(), &L2, clock()).expect("bring-up");
    assert_eq!(nic.mac(), MAC);
    assert_eq!(
        f.writes_to(IMC)[..2],
        [u32::MAX, u32::MAX],
        "masked before and after reset"
    );
    assert_eq!(
        f.get(RAH0),
        0x0700 | RAH_AV,
        "bytes 4 and 5 little-endian, AV set"
    );
    let rctl = f.get(RCTL);
    for (bit, name) in [
        (RCTL_UPE, "UPE"),
        (RCTL_MPE, "MPE"),
        (RCTL_BAM, "BAM"),
        (RCTL_SECRC, "SECRC"),
        (RCTL_BSEX | RCTL_BSIZE_4096, "BSEX|BSIZE=4096"),
        (crate::ddnic::RCTL_EN, "EN"),
    ] {
        assert_eq!(rctl & bit, bit, "RCTL.{name} in {rctl:#x}");
    }
    assert_eq!(rctl & RCTL_LPE, 0, "no long packets at MTU 1500");
    assert_eq!(
        f.get(RXCSUM),
        0,
        "no checksum offload: errors are frame errors only"
    );
    assert_eq!(f.get(RDLEN), 4096, "256 legacy descriptors");
    assert_eq!(
        f.get(TCTL),
        crate::ddnic::TCTL_EN | TCTL_PSP | TCTL_CT | TCTL_COLD
    );
    assert_eq!(f.get(TARC0) & TARC_ENABLE, TARC_ENABLE);
    assert!(
        f.writes_to(crate::ddnic::SRRCTL).is_empty(),
        "no SRRCTL on an 82574L"
    );
    assert_eq!(
        f.writes_to(MTA).len(),
        1,
        "the multicast table cleared once"
    );
    assert_eq!((f.get(RDT), f.get(TDT)), (0, 0));
    let s = nic.stats();
    assert_eq!(
        s.mmio_reads, None,
        "the scripted file counts nothing itself"
    );
}

#[test]
fn router_mode_filters_unicast_and_accepts_broadcast_and_jumbo_sets_lpe() {
    let f = Fake::new(OK);
    let cfg = E1000eConfig {
        filter: RxFilter::Router,
        max_frame: 9014,
        multicast: [None; MAX_MULTICAST],
        link_local_group: false,
    };
    let _nic = bring_up::<HostHal, _>(f.clone(), &cfg, clock()).expect("bring-up");
    let rctl = f.get(RCTL);
    assert_eq!(rctl & (RCTL_UPE | RCTL_MPE), 0);
    assert_eq!(rctl & RCTL_BAM, RCTL_BAM);
    assert_eq!(rctl & RCTL_LPE, RCTL_LPE);
}

/// An IPv6 router's port: the multicast table takes all-nodes, the global address's
/// solicited-node group and the link-local one's, made from the MAC found (its last three
/// bytes), each once; nothing else.
#[test]
fn an_ipv6_routers_groups_are_in_the_multicast_table() {
    let f = Fake::new(OK);
    let all_nodes = [0x33, 0x33, 0, 0, 0, 1];
    let solicited = [0x33, 0x33, 0xff, 0x01, 0x23, 0x45];
    let mut multicast = [None; MAX_MULTICAST];
    multicast[..2].copy_from_slice(&[Some(all_nodes), Some(solicited)]);
    let cfg = E1000eConfig {
        filter: RxFilter::Router,
        max_frame: 1514,
        multicast,
        link_local_group: true,
    };
    let _nic = bring_up::<HostHal, _>(f.clone(), &cfg, clock()).expect("bring-up");
    let link_local = [0x33, 0x33, 0xff, MAC[3], MAC[4], MAC[5]];
    let mut want = [0u32; 128];
    for g in [all_nodes, solicited, link_local] {
        let i = mta_index(&g);
        want[usize::from(i >> 5)] |= 1 << (i & 31);
    }
    let got: Vec<u32> = (0..128).map(|k| f.get(MTA + 4 * k)).collect();
    assert_eq!(got, want);
    assert_eq!(want.iter().map(|w| w.count_ones()).sum::<u32>(), 3);
    assert_eq!(f.writes_to(MTA).len(), 1, "written once");
}

#[test]
fn the_mac_comes_from_the_eeprom_when_ral_is_not_valid() {
    let f = Fake::new(Script {
        ral_valid: false,
        ..OK
    });
    let nic = bring_up::<HostHal, _>(f.clone(), &L2, clock()).expect("bring-up");
    assert_eq!(nic.mac(), EEPROM_MAC);
    assert_eq!(
        f.writes_to(EERD),
        [EERD_START, 1 << 2 | EERD_START, 2 << 2 | EERD_START]
    );
    assert_eq!(f.get(RAL0), u32::from_le_bytes([0x52, 0x54, 0x00, 0x12]));
    assert_eq!(f.get(RAH0), 0x5634 | RAH_AV);
}

#[test]
fn an_unreadable_eeprom_a_stuck_reset_and_a_dead_link_are_named_errors() {
    let e = bring_up::<HostHal, _>(
        Fake::new(Script {
            ral_valid: false,
            eeprom_answers: false,
            ..OK
        }),
        &L2,
        clock(),
    )
    .err();
    assert_eq!(e, Some(E1000eError::EepromTimeout { word: 0 }));
    let e = bring_up::<HostHal, _>(
        Fake::new(Script {
            reset_clears: false,
            ..OK
        }),
        &L2,
        clock(),
    )
    .err();
    assert_eq!(e, Some(E1000eError::ResetTimeout));
    let f = Fake::new(Script { link: false, ..OK });
    let e = bring_up::<HostHal, _>(f.clone(), &L2, clock()).err();
    let Some(E1000eError::LinkTimeout { ms }) = e else {
        panic!("want LinkTimeout, got {e:?}")
    };
    assert!(
        (LINK_TIMEOUT_MS..LINK_TIMEOUT_MS + 5).contains(&ms),
        "{ms} ms"
    );
    assert!(
        f.writes_to(RCTL).is_empty(),
        "no unit enabled without a link"
    );
    assert!(
        std::format!("{}", E1000eError::LinkTimeout { ms }).contains("link down"),
        "the boot error says what failed"
    );
    // The bounded waits read registers at set-up only.
    assert!(f.reads() > 10);
}

#[test]
fn a_multicast_or_zero_mac_is_refused() {
    for bad in [[0u8; 6], [0x01, 0, 0x5e, 0, 0, 1]] {
        let f = Fake::new(OK);
        f.regs
            .borrow_mut()
            .insert(RAL0, u32::from_le_bytes([bad[0], bad[1], bad[2], bad[3]]));
        f.regs
            .borrow_mut()
            .insert(RAH0, u32::from_le_bytes([bad[4], bad[5], 0, 0]) | RAH_AV);
        let e = bring_up::<HostHal, _>(f, &L2, clock()).err();
        // All zero with AV set reads as "no address" and falls back to the EEPROM.
        if bad == [0; 6] {
            assert_eq!(e, None);
        } else {
            assert_eq!(e, Some(E1000eError::BadMac(bad)));
        }
    }
}

#[test]
fn the_mta_hash_is_bits_47_to_36_of_the_address() {
    // 33:33:00:00:00:01 (IPv6 all-nodes): bytes 4, 5 = 0x00, 0x01 -> 0x010.
    assert_eq!(mta_index(&[0x33, 0x33, 0, 0, 0, 1]), 0x010);
    // 01:00:5e:00:00:fb (mDNS): 0x00 >> 4 | 0xfb << 4 = 0xfb0.
    assert_eq!(mta_index(&[0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb]), 0xfb0);
    let f = Fake::new(OK);
    set_multicast(&f, &[[0x33, 0x33, 0, 0, 0, 1]]);
    assert_eq!(f.get(MTA), 1 << 16);
    assert_eq!(f.writes_to(MTA + 4 * 127), [0]);
}

/// [`MmioRegs`] over plain memory standing in for BAR 0 (a write is only stored: the test plays
/// the device's side effects), and that memory.
fn bar_in_memory() -> (MmioRegs, Box<[u32]>) {
    let mut bar = std::vec![0u32; BAR0_BYTES / 4].into_boxed_slice();
    let base = NonNull::new(bar.as_mut_ptr().cast::<u8>()).expect("a boxed slice is not null");
    // SAFETY: `base` is BAR0_BYTES of 4-aligned memory in a heap allocation that moves with
    // the box and is never freed before the handle (the caller keeps both, the handle first
    // in the tuple, so it drops first) and never touched except through it.
    (unsafe { MmioRegs::new(base) }, bar)
}

/// The link after our own reset ([`DdRegs::reset_device`], `quit`'s phase 2) is `STATUS` as
/// read just before it: the final STATS says up at 1000 Mb/s with no change counted, though
/// the reset cleared `STATUS.LU` (QEMU's 82576 does); a second reset (the drop's) keeps it.
/// A link that went down before the reset is reported down, its change counted.
#[test]
fn after_our_own_reset_the_link_is_the_one_read_before_it_and_no_change_is_counted() {
    let link = |regs: &MmioRegs| {
        let mut s = DriverStats::default();
        regs.hw_stats(&mut s);
        (s.link_up, s.link_speed_mbps, s.link_changes)
    };
    let up_1000 = STATUS_LU | 0b10 << STATUS_SPEED_SHIFT;
    let (regs, _bar) = bar_in_memory();
    regs.write(STATUS, up_1000);
    assert_eq!(link(&regs), (Some(true), Some(1000), 0));
    assert!(regs.reset_device());
    assert_eq!(regs.read(CTRL), CTRL_RST, "the reset is written");
    regs.write(STATUS, 0); // the device's side of CTRL.RST: link down until CTRL.SLU
    assert_eq!(link(&regs), (Some(true), Some(1000), 0));
    assert_eq!(regs.link_up(), Some(true));
    assert!(regs.reset_device());
    assert_eq!(link(&regs), (Some(true), Some(1000), 0));

    let (regs, _bar) = bar_in_memory();
    regs.write(STATUS, up_1000);
    assert_eq!(link(&regs), (Some(true), Some(1000), 0));
    regs.write(STATUS, 0); // the wire: down before the reset
    assert!(regs.reset_device());
    regs.write(STATUS, up_1000); // whatever the device says afterwards
    assert_eq!(link(&regs), (Some(false), None, 1));
}

/// The simulated e1000e ([`crate::sim::dd`] with the 82574L's `STATUS`) through the real
/// bring-up, then 4,000 frames forwarded A → B in fused bursts of 32 with the TX ring
/// completed after every burst: no register read inside the forwarding loop, one `RDT` write
/// per 32 re-posted buffers, one `TDT` write per burst; then a TX ring the device never
/// completes (QEMU never shows one: its `TDT` write sends the whole ring at once): the burst
/// hands back what does not fit as `TxFull`, no page lost; every page back after reset.
#[test]
fn the_simulated_e1000e_forwards_without_register_reads_and_survives_a_full_tx_ring() {
    use crate::nic::{ForwardOps, GiveBack, RxVerdict, TxOwner};
    use crate::sim::dd::{SimDdDevice, SimDdRegs, SimDdShared};
    use mm::Pfn;
    use virtio_drivers::{BufferDirection, Hal};

    struct Ops<'a> {
        spare: &'a mut Vec<Pfn>,
        back: &'a mut Vec<(Pfn, GiveBack)>,
    }
    impl ForwardOps for Ops<'_> {
        fn rx_page(&mut self) -> Option<Pfn> {
            self.spare.pop()
        }
        fn rx_page_cached(&mut self) -> Option<Pfn> {
            None
        }
        fn forward(&mut self, _pfn: Pfn, _frame: &mut [u8]) -> RxVerdict {
            RxVerdict::Forward
        }
        fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
            self.back.push((pfn, why));
        }
    }

    let shared = |mac| -> &'static SimDdShared { Box::leak(Box::new(SimDdShared::new(mac))) };
    let (sa, sb) = (shared(MAC), shared([2, 0, 0, 0, 0, 8]));
    let mut a = bring_up::<HostHal, _>(SimDdRegs(sa), &L2, clock()).expect("port A");
    let mut b = bring_up::<HostHal, _>(SimDdRegs(sb), &L2, clock()).expect("port B");
    assert_eq!((a.mac(), b.mac()), (MAC, [2, 0, 0, 0, 0, 8]));
    // SAFETY: HostHal memory is identity-mapped and outlives the players in this test.
    let (mut da, mut db) = unsafe { (SimDdDevice::new(sa), SimDdDevice::new(sb)) };
    let mut spare: Vec<Pfn> = (0..2000)
        .map(|_| Pfn::from_addr(HostHal::dma_alloc(1, BufferDirection::Both).0))
        .collect();
    let total = spare.len();
    let fill: Vec<Pfn> = spare.split_off(spare.len() - 255);
    // SAFETY: fresh pages, ours until they come back.
    assert_eq!(unsafe { a.rx_refill(&fill) }, 255);
    let frame = [0x5au8; 60];
    let (reads0, kicks0) = (sa.reads() + sb.reads(), a.stats().kicks_rx);
    let mut back = Vec::new();
    let (mut sent, mut bursts) = (0usize, 0u64);
    for _ in 0..125 {
        assert_eq!(da.deliver_rx(&frame, 32), 32);
        let (s, bk) = (&mut spare, &mut back);
        // The blocks move the borrows in: the closure is `FnOnce`, as `forward_burst` takes.
        let ops = move || {
            let (spare, back) = ({ s }, { bk });
            Ops { spare, back }
        };
        // SAFETY: pages from `spare` are ours; forwarded ones are `b`'s until completed.
        let st = unsafe { a.forward_burst(&mut b, 32, TxOwner::new(1), ops) };
        assert_eq!(st.tx_frames, 32);
        bursts += 1;
        sent += db.complete_tx(|f| assert_eq!(f, &frame[..]));
        let mut done = Vec::new();
        b.tx_reclaim(|p, _| done.push(p));
        spare.extend(done);
    }
    assert_eq!(sent, 4000);
    assert_eq!(
        sa.reads() + sb.reads(),
        reads0,
        "no register read inside the forwarding loop"
    );
    let kicks_rx = a.stats().kicks_rx - kicks0;
    assert_eq!(
        kicks_rx,
        4000 / 32,
        "one RDT write per 32 re-posted buffers"
    );
    assert_eq!(b.stats().kicks_tx, bursts, "one TDT write per burst");
    assert!(back.is_empty());

    // TX never completed: 255 descriptors take frames, the rest come back as TxFull.
    for _ in 0..10 {
        da.deliver_rx(&frame, 32);
        let (s, bk) = (&mut spare, &mut back);
        // The blocks move the borrows in: the closure is `FnOnce`, as `forward_burst` takes.
        let ops = move || {
            let (spare, back) = ({ s }, { bk });
            Ops { spare, back }
        };
        // SAFETY: as above.
        unsafe { a.forward_burst(&mut b, 32, TxOwner::new(1), ops) };
    }
    assert_eq!(b.tx_posted(), 255, "a full TX ring: one slot stays empty");
    assert_eq!(back.len(), 320 - 255);
    assert!(back.iter().all(|&(_, why)| why == GiveBack::TxFull));
    // Teardown: every page comes back exactly once.
    let mut all: Vec<Pfn> = spare.clone();
    all.extend(back.iter().map(|&(p, _)| p));
    for nic in [&mut a, &mut b] {
        assert!(nic.reset_device());
        // SAFETY: reset just above.
        unsafe { nic.take_pages(&mut |p| all.push(p)) };
    }
    all.sort_by_key(|p| p.0);
    let n = all.len();
    all.dedup();
    assert_eq!(
        (n, all.len()),
        (total, total),
        "every page back exactly once"
    );
}

/// Frames of several descriptors (MTU 9000 in 4 KiB buffers): collected, across bursts too,
/// shown whole to `forward_multi` and sent zero copy as as many TX descriptors; a frame of
/// more than `MAX_FRAME_PAGES` buffers and one with an error on a continuation are dropped
/// (`TooBig`, `Malformed`); a frame half collected when the staged path reads the ring comes
/// back through `rx_burst`; every page back exactly once after reset.
#[test]
fn jumbo_frames_of_several_descriptors_are_forwarded_zero_copy() {
    use crate::ddnic::{RxDesc, RDBAH, RDBAL, RDH, STA_DD};
    use crate::nic::{
        ForwardOps, GiveBack, MultiFrame, RxBuf, RxStatus, RxVerdict, TxOwner, MAX_FRAME_PAGES,
    };
    use crate::sim::dd::{SimDdDevice, SimDdRegs, SimDdShared};
    use mm::{Pfn, PAGE_SIZE};
    use std::vec;
    use virtio_drivers::{BufferDirection, Hal};

    struct Ops<'a> {
        spare: &'a mut Vec<Pfn>,
        back: &'a mut Vec<(Pfn, GiveBack)>,
        multi: &'a mut Vec<(usize, Vec<u16>)>,
    }
    impl ForwardOps for Ops<'_> {
        fn rx_page(&mut self) -> Option<Pfn> {
            self.spare.pop()
        }
        fn rx_page_cached(&mut self) -> Option<Pfn> {
            None
        }
        fn forward(&mut self, _pfn: Pfn, _frame: &mut [u8]) -> RxVerdict {
            RxVerdict::Forward
        }
        fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
            self.back.push((pfn, why));
        }
        fn forward_multi(&mut self, f: MultiFrame<'_>) -> RxVerdict {
            assert_eq!(f.offset, 0);
            assert_eq!(f.head.as_ptr() as u64, f.pages[0].addr());
            assert_eq!(f.head.len(), usize::from(f.lens[0]));
            assert_eq!(f.len, f.lens.iter().map(|&l| usize::from(l)).sum::<usize>());
            // The headers are rewritten in place, as a forwarder does.
            f.head[0] ^= 0xFF;
            self.multi.push((f.len, f.lens.to_vec()));
            RxVerdict::Forward
        }
    }

    let shared = |mac| -> &'static SimDdShared { Box::leak(Box::new(SimDdShared::new(mac))) };
    let (sa, sb) = (shared(MAC), shared([2, 0, 0, 0, 0, 8]));
    let jumbo = E1000eConfig {
        filter: RxFilter::Promiscuous,
        max_frame: 9014,
        multicast: [None; MAX_MULTICAST],
        link_local_group: false,
    };
    let mut a = bring_up::<HostHal, _>(SimDdRegs(sa), &jumbo, clock()).expect("port A");
    let mut b = bring_up::<HostHal, _>(SimDdRegs(sb), &jumbo, clock()).expect("port B");
    // SAFETY: HostHal memory is identity-mapped and outlives the players in this test.
    let (mut da, mut db) = unsafe { (SimDdDevice::new(sa), SimDdDevice::new(sb)) };
    let mut spare: Vec<Pfn> = (0..1200)
        .map(|_| Pfn::from_addr(HostHal::dma_alloc(1, BufferDirection::Both).0))
        .collect();
    let total = spare.len();
    let fill: Vec<Pfn> = spare.split_off(spare.len() - 255);
    // SAFETY: fresh pages, ours until they come back.
    assert_eq!(unsafe { a.rx_refill(&fill) }, 255);
    type Port = E1000e<HostHal, SimDdRegs<'static>>;
    fn burst(
        a: &mut Port,
        b: &mut Port,
        spare: &mut Vec<Pfn>,
        back: &mut Vec<(Pfn, GiveBack)>,
        multi: &mut Vec<(usize, Vec<u16>)>,
        max: usize,
    ) -> crate::nic::BurstStats {
        // The blocks move the borrows in: the closure is `FnOnce`, as `forward_burst` takes.
        let ops = move || {
            let (spare, back, multi) = ({ spare }, { back }, { multi });
            Ops { spare, back, multi }
        };
        // SAFETY: pages from `spare` are ours; forwarded ones are `b`'s until completed.
        unsafe { a.forward_burst(b, max, TxOwner::new(1), ops) }
    }
    let (mut back, mut multi) = (Vec::new(), Vec::new());

    // RX descriptor `i` of A's ring, as the device left it.
    let rx_desc = |i: usize| -> *mut RxDesc {
        let base = u64::from(sa.get(RDBAL)) | u64::from(sa.get(RDBAH)) << 32;
        (base as usize + 16 * (i % 256)) as *mut RxDesc
    };
    // DD cleared on descriptor `i` (the device still writing the frame), or set again.
    let set_dd = |i: usize, on: bool| {
        let d = rx_desc(i);
        // SAFETY: a descriptor of A's RX ring (host memory), played by this test.
        unsafe {
            let mut v = d.read_volatile();
            v.status = if on {
                v.status | STA_DD
            } else {
                v.status & !STA_DD
            };
            d.write_volatile(v);
        }
    };
    // 9,014-byte frames (three descriptors: 4,096 + 4,096 + 822), bursts of 4 frames (12
    // buffers: a frame counts once against the budget).
    let frame: Vec<u8> = (0..9014u32).map(|i| i as u8).collect();
    let mut want = frame.clone();
    want[0] ^= 0xFF;
    let mut out = Vec::new();
    for _ in 0..20 {
        assert_eq!(da.deliver_rx(&frame, 4), 4);
        let st = burst(&mut a, &mut b, &mut spare, &mut back, &mut multi, 4);
        assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (12, 4, 4));
        assert_eq!((st.rx_bytes, st.tx_bytes), (4 * 9014, 4 * 9014));
        db.complete_tx(|f| out.push(f.to_vec()));
        b.tx_reclaim(|p, _| spare.push(p));
    }
    assert_eq!(out.len(), 80);
    assert!(out.iter().all(|f| *f == want), "every frame sent whole");
    assert_eq!(multi.len(), 80);
    assert_eq!(multi[0], (9014, vec![4096, 4096, 822]));
    assert!(back.is_empty(), "{back:?}");
    assert_eq!(b.stats().kicks_tx, 20, "one TDT write per burst");

    // A frame the device has not finished (DD not yet on its last descriptor): its first
    // buffers are collected in one burst, the frame sent whole in the next.
    let at = sa.get(RDH) as usize;
    assert_eq!(da.deliver_rx(&frame, 1), 1);
    set_dd(at + 2, false);
    let st = burst(&mut a, &mut b, &mut spare, &mut back, &mut multi, 32);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (2, 0, 0));
    set_dd(at + 2, true);
    let st = burst(&mut a, &mut b, &mut spare, &mut back, &mut multi, 32);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (1, 1, 1));
    assert_eq!(db.complete_tx(|f| assert_eq!(f, &want[..])), 1);
    b.tx_reclaim(|p, _| spare.push(p));

    // More buffers than a frame may have: dropped as too big, every page back.
    let huge = vec![0x11u8; MAX_FRAME_PAGES * PAGE_SIZE + 100];
    assert_eq!(da.deliver_rx(&huge, 1), 1);
    let st = burst(&mut a, &mut b, &mut spare, &mut back, &mut multi, 32);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (5, 0, 0));
    let whys: Vec<GiveBack> = back.iter().map(|&(_, w)| w).collect();
    spare.extend(back.drain(..).map(|(p, _)| p));
    assert_eq!(whys.len(), 5);
    assert_eq!(whys[0], GiveBack::Rx(RxStatus::TooBig));
    assert!(whys[1..]
        .iter()
        .all(|&w| w == GiveBack::Rx(RxStatus::Continuation)));

    // An error on a continuation: the frame is malformed, its pages back, errors counted.
    let clean = sa.get(RDH) as usize;
    assert_eq!(da.deliver_rx(&frame, 1), 1);
    let d = rx_desc(clean + 1);
    // SAFETY: a descriptor of A's RX ring the device just wrote back (host memory).
    unsafe {
        let mut v = d.read_volatile();
        v.errors = 0x01;
        d.write_volatile(v);
    }
    let errors0 = a.stats().rx_errors;
    let st = burst(&mut a, &mut b, &mut spare, &mut back, &mut multi, 32);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (3, 0, 0));
    assert_eq!(a.stats().rx_errors, errors0 + 1);
    let whys: Vec<GiveBack> = back.iter().map(|&(_, w)| w).collect();
    spare.extend(back.drain(..).map(|(p, _)| p));
    assert_eq!(whys[0], GiveBack::Rx(RxStatus::Malformed));
    assert_eq!(whys.len(), 3);

    // Half collected when the staged path reads the ring: its pages come back from
    // `rx_burst` (the first `TooBig`), the rest of the frame as a continuation.
    let at = sa.get(RDH) as usize;
    assert_eq!(da.deliver_rx(&frame, 1), 1);
    set_dd(at + 2, false);
    let st = burst(&mut a, &mut b, &mut spare, &mut back, &mut multi, 32);
    assert_eq!((st.buffers, st.rx_frames), (2, 0));
    set_dd(at + 2, true);
    let mut bufs = [RxBuf {
        pfn: Pfn(0),
        len: 0,
        status: RxStatus::Unused,
    }; 8];
    let n = a.rx_burst(&mut bufs);
    let got: Vec<RxStatus> = bufs[..n].iter().map(|b| b.status).collect();
    assert_eq!(
        got,
        [
            RxStatus::Continuation,
            RxStatus::TooBig,
            RxStatus::Continuation
        ]
    );
    spare.extend(bufs[..n].iter().map(|b| b.pfn));

    // The port's frame limit (the MTU + 18 of l2) at MTU 9000 (frames of several
    // descriptors) and 1500 (one descriptor, the fast path's length test): MTU − 1 and MTU
    // are forwarded, MTU + 1 handed back as one `too_big`, never shown to the dataplane.
    for mtu in [9000usize, 1500] {
        let limit = mtu + 18;
        a.set_rx_frame_limit(limit);
        multi.clear();
        for len in [limit - 1, limit, limit + 1] {
            assert_eq!(da.deliver_rx(&vec![0x22u8; len], 1), 1);
        }
        let st = burst(&mut a, &mut b, &mut spare, &mut back, &mut multi, 32);
        assert_eq!(st.tx_frames, 2, "MTU {mtu}: {st:?}");
        let mut lens = Vec::new();
        assert_eq!(db.complete_tx(|f| lens.push(f.len())), 2);
        assert_eq!(lens, [limit - 1, limit], "MTU {mtu}");
        assert!(
            multi.iter().all(|&(l, _)| l <= limit),
            "MTU {mtu}: {multi:?}"
        );
        let too_big = back
            .iter()
            .filter(|&&(_, w)| {
                w == GiveBack::Rx(RxStatus::TooBig) || w == GiveBack::Multi { first: true }
            })
            .count();
        assert_eq!(too_big, 1, "MTU {mtu}: {back:?}");
        spare.extend(back.drain(..).map(|(p, _)| p));
        b.tx_reclaim(|p, _| spare.push(p));
    }

    // Teardown: every page comes back exactly once.
    let mut all: Vec<Pfn> = spare.clone();
    for nic in [&mut a, &mut b] {
        assert!(nic.reset_device());
        // SAFETY: reset just above.
        unsafe { nic.take_pages(&mut |p| all.push(p)) };
    }
    all.sort_by_key(|p| p.0);
    let n = all.len();
    all.dedup();
    assert_eq!(
        (n, all.len()),
        (total, total),
        "every page back exactly once"
    );
}
