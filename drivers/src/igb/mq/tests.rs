//! Host tests of the 82576's queue pairs and RSS set-up: where each queue's ring registers
//! are, what the port-wide RSS registers hold, the named refusals, a whole two-queue bring-up
//! on a register file that keeps what is written, and a queue the device does not enable.

use super::*;
use crate::ddnic::{CTRL, CTRL_RST, RCTL, RDT, SRRCTL, TDT, XDCTL_ENABLE};
use crate::e1000e::{RxFilter, STATUS};
use crate::igb::{start, MDIC, MDIC_READY, MRQC};
use crate::nic::Nic;
use crate::sim::dd::{SimDdRegs, SimDdShared};
use crate::sim::HostHal;

extern crate std;
use std::boxed::Box;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::vec::Vec;

const L2: IgbConfig = IgbConfig {
    filter: RxFilter::Promiscuous,
    max_frame: 1514,
    multicast: [None; crate::e1000e::MAX_MULTICAST],
    link_local_group: false,
};

/// A clock that moves 100 µs per reading.
fn clock() -> impl Fn() -> u64 {
    let t = core::cell::Cell::new(0u64);
    move || {
        t.set(t.get() + 100);
        t.get()
    }
}

/// A register file that keeps every write (shared by its handles) and answers as a NIC that
/// resets at once, has its link up, a PHY that is always ready and a MAC in `RAL0`/`RAH0`.
#[derive(Clone, Default)]
struct Keep(Rc<RefCell<BTreeMap<usize, u32>>>, Rc<RefCell<Vec<usize>>>);

impl Keep {
    fn new() -> Self {
        let k = Keep::default();
        k.0.borrow_mut().insert(0x5400, 0x0000_0002);
        k.0.borrow_mut().insert(0x5404, 0x8000_0b00);
        k
    }
    fn get(&self, reg: usize) -> u32 {
        self.0.borrow().get(&reg).copied().unwrap_or(0)
    }
}

impl DdRegs for Keep {
    fn read(&self, reg: usize) -> u32 {
        match reg {
            STATUS => 1 << 1,
            MDIC => MDIC_READY,
            _ => self.get(reg),
        }
    }
    fn write(&self, reg: usize, val: u32) {
        self.1.borrow_mut().push(reg);
        let val = if reg == CTRL { val & !CTRL_RST } else { val };
        self.0.borrow_mut().insert(reg, val);
    }
}

impl ShareRegs for Keep {
    fn share(&self) -> Self {
        self.clone()
    }
}

/// RSS over `queues` queues with the table round-robin and a key of bytes 1..=40.
fn rss(queues: usize) -> Rss {
    Rss {
        queues,
        key: core::array::from_fn(|i| i as u8 + 1),
        reta: core::array::from_fn(|i| (i % queues.max(1)) as u8),
    }
}

#[test]
fn queue_n_ring_registers_are_at_the_datasheet_offsets_and_queue_0_at_its_aliases() {
    let k = Keep::new();
    let q0 = QueueRegs::new(k.clone(), 0);
    let q3 = QueueRegs::new(k.clone(), 3);
    let q15 = QueueRegs::new(k.clone(), 15);
    q0.write(RDT, 10);
    q3.write(RDT, 11);
    q3.write(TDT, 12);
    q3.write(RXDCTL, 13);
    q3.write(SRRCTL, 14);
    q15.write(TXDCTL, 15);
    q15.write(RDBAL, 16);
    q3.write(RCTL, 17);
    assert_eq!(k.get(0x2818), 10, "RDT0 at its alias");
    assert_eq!(k.get(0xC018 + 3 * 0x40), 11, "RDT3");
    assert_eq!(k.get(0xE018 + 3 * 0x40), 12, "TDT3");
    assert_eq!(k.get(0xC028 + 3 * 0x40), 13, "RXDCTL3");
    assert_eq!(k.get(0xC00C + 3 * 0x40), 14, "SRRCTL3");
    assert_eq!(k.get(0xE028 + 15 * 0x40), 15, "TXDCTL15");
    assert_eq!(k.get(0xC000 + 15 * 0x40), 16, "RDBAL15");
    assert_eq!(k.get(RCTL), 17, "port registers are not moved");
    assert_eq!((q3.queue(), QueueRegs::new(k, 16).queue()), (3, 0));
}

#[test]
fn rss_writes_the_key_and_table_little_endian_and_turns_rss_on() {
    let k = Keep::new();
    program_rss(&k, &rss(3));
    assert_eq!(k.get(RSSRK), 0x0403_0201);
    assert_eq!(k.get(RSSRK + 36), 0x2827_2625);
    assert_eq!(k.get(RETA), 0x0002_0100, "entries 0..4: queues 0 1 2 0");
    assert_eq!(k.get(RETA + 4), 0x0100_0201, "entries 4..8: queues 1 2 0 1");
    assert_eq!(
        k.get(RETA + 124),
        0x0100_0201,
        "entries 124..128: queues 1 2 0 1"
    );
    assert_eq!(k.get(RXCSUM), RXCSUM_PCSD);
    assert_eq!(k.get(MRQC), 0b010 | 0x00F3_0000);
}

#[test]
fn a_bad_queue_count_or_table_entry_is_a_named_error_before_any_write() {
    for (asked, want) in [
        (0, IgbError::Queues { asked: 0 }),
        (17, IgbError::Queues { asked: 17 }),
    ] {
        let k = Keep::new();
        let s = start(k.clone(), &L2, &clock()).expect("start");
        let before = k.1.borrow().len();
        let e = finish_queues::<HostHal, _>(s, &L2, &rss(asked), &clock())
            .err()
            .expect("refused");
        assert_eq!(e, want);
        assert!(std::format!("{e}").contains("1..=16"), "{e}");
        // Only the dropped `Starting`'s reset was written.
        assert_eq!(k.1.borrow()[before..], [CTRL]);
    }
    let k = Keep::new();
    let s = start(k.clone(), &L2, &clock()).expect("start");
    let mut bad = rss(2);
    bad.reta[77] = 2;
    let e = finish_queues::<HostHal, _>(s, &L2, &bad, &clock())
        .err()
        .expect("refused");
    assert_eq!(
        e,
        IgbError::RetaEntry {
            index: 77,
            queue: 2,
            queues: 2
        }
    );
    assert_eq!(
        std::format!("{e}"),
        "igb: redirection table entry 77 names queue 2, but only queues 0..2 are brought up"
    );
    assert_eq!(k.get(MRQC), 0, "RSS never turned on");
}

#[test]
fn two_queues_get_rings_of_their_own_enabled_on_their_own_registers() {
    let k = Keep::new();
    let s = start(k.clone(), &L2, &clock()).expect("start");
    let qs = finish_queues::<HostHal, _>(s, &L2, &rss(2), &clock()).expect("bring-up");
    assert_eq!(qs.len(), 2);
    let (rx0, rx1) = (k.get(0x2800), k.get(0xC040));
    let (tx0, tx1) = (k.get(0x3800), k.get(0xE040));
    assert!(rx0 != 0 && rx1 != 0 && tx0 != 0 && tx1 != 0);
    let mut all = [rx0, rx1, tx0, tx1];
    all.sort_unstable();
    assert!(all.windows(2).all(|w| w[0] != w[1]), "four rings: {all:x?}");
    assert_eq!(k.get(0x2808), 4096);
    assert_eq!(k.get(0xC048), 4096, "RDLEN1");
    assert_eq!(k.get(0xE048), 4096, "TDLEN1");
    for rxdctl in [0x2828, 0xC068] {
        assert_ne!(k.get(rxdctl) & XDCTL_ENABLE, 0, "{rxdctl:#x}");
    }
    for txdctl in [0x3828, 0xE068] {
        assert_ne!(k.get(txdctl) & XDCTL_ENABLE, 0, "{txdctl:#x}");
    }
    assert_eq!(k.get(0xC04C), k.get(0x280C), "SRRCTL1 as SRRCTL0");
    assert_eq!(k.get(MRQC), MRQC_ENABLE_RSS | MRQC_RSS_FIELDS);
    assert_eq!(qs[0].mac(), qs[1].mac());
    // Queue 1's teardown disables queue 1 only; queue 0's resets the port.
    let mut qs = qs;
    assert!(!qs[1].reset_device());
    assert_eq!(k.get(0xC068) & XDCTL_ENABLE, 0);
    assert_eq!(k.get(0xE068) & XDCTL_ENABLE, 0);
    assert_ne!(k.get(0x2828) & XDCTL_ENABLE, 0, "queue 0 untouched");
    let writes = k.1.borrow().len();
    assert!(qs[0].reset_device());
    assert_eq!(k.1.borrow()[writes..], [CTRL]);
}

#[test]
fn one_queue_leaves_rss_off_as_the_single_queue_bring_up_does() {
    let k = Keep::new();
    let s = start(k.clone(), &L2, &clock()).expect("start");
    let qs = finish_queues::<HostHal, _>(s, &L2, &rss(1), &clock()).expect("bring-up");
    assert_eq!(qs.len(), 1);
    assert_eq!((k.get(MRQC), k.get(RXCSUM), k.get(RETA)), (0, 0, 0));
    assert_ne!(k.get(0x2828) & XDCTL_ENABLE, 0);
}

/// The simulated NIC with queue 1's `RXDCTL.ENABLE` never reading back.
struct NoQueue1(SimDdRegs<'static>);

impl DdRegs for NoQueue1 {
    fn read(&self, reg: usize) -> u32 {
        match reg {
            0xC068 => 0,
            _ => self.0.read(reg),
        }
    }
    fn write(&self, reg: usize, val: u32) {
        self.0.write(reg, val)
    }
}

impl ShareRegs for NoQueue1 {
    fn share(&self) -> Self {
        NoQueue1(SimDdRegs(self.0 .0))
    }
}

#[test]
fn a_second_queue_the_device_does_not_enable_is_named_and_the_port_left_reset() {
    let s: &'static SimDdShared = Box::leak(Box::new(SimDdShared::new([2, 0, 0, 0, 0, 11])));
    let st = start(NoQueue1(SimDdRegs(s)), &L2, &clock()).expect("start");
    let e = finish_queues::<HostHal, _>(st, &L2, &rss(2), &clock())
        .err()
        .expect("queue 1 never enables");
    assert_eq!(e, IgbError::QueueTimeout { queue: 1 });
    assert!(std::format!("{e}").contains("RXDCTL1.ENABLE"), "{e}");
    assert!(s.is_reset(), "the port reset, queue 0's rings gone");
    assert_eq!(s.get(MRQC), 0, "RSS off again");
    assert_eq!(s.get(0xC068) & XDCTL_ENABLE, 0, "queue 1 disabled");
}
