//! The tools' MTU plumbing on real tap devices, without a guest: `TapNet::create_with_mtu`
//! raises each tap's MTU, the kernel then takes AF_PACKET frames up to MTU + 14 bytes (and
//! refuses one more), the generator refuses a `--size` over a tap's MTU before sending, and
//! `Hosts` sets its own MTU in the host namespaces. No QEMU is started (end-to-end jumbo
//! forwarding needs the guest's multi-buffer RX).
//!
//! Needs root and /dev/net/tun: fails, with that message, where those are missing.

use gannet_tests::*;
use harness::gen::{FrameExceedsMtu, GenConfig, Generator};
use harness::hosts::{plan_with_mtu, Hosts};
use harness::qemu::Mtus;
use harness::tap::{PacketSocket, TapNet};

/// A frame of `len` bytes (no FCS) the guest would not care about: broadcast, an unused
/// EtherType.
fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0x0a, 2]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]); // IEEE 802 local experimental
    f
}

/// `EMSGSIZE` on Linux (asm-generic/errno.h): an AF_PACKET send over the interface's MTU.
const EMSGSIZE: i32 = 90;

#[test]
fn taps_take_frames_up_to_their_mtu() {
    require_tap();
    let mtus = Mtus::parse("9000,1500").unwrap();
    let net = TapNet::create_with_mtu(2, 1, Some(&mtus)).expect("tap namespace");
    assert_eq!((net.mtu(0), net.mtu(1)), (Some(9000), Some(1500)));
    let socks =
        PacketSocket::open_in(&net.path(), &["gtap0".into(), "gtap1".into()]).expect("sockets");
    assert_eq!(socks[0].mtu().unwrap(), 9000);
    assert_eq!(socks[1].mtu().unwrap(), 1500);
    assert_eq!(
        socks[0].send(&frame(9014)).expect("9014 B on MTU 9000"),
        9014
    );
    let err = socks[0].send(&frame(9015)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(EMSGSIZE), "{err}");
    assert_eq!(
        socks[1].send(&frame(1514)).expect("1514 B on MTU 1500"),
        1514
    );
    let err = socks[1].send(&frame(1515)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(EMSGSIZE), "{err}");
}

#[test]
fn generator_refuses_a_size_over_the_tap_mtu() {
    require_tap();
    let net = TapNet::create(2, 1).expect("tap namespace");
    let cfg = GenConfig {
        netns: Some(net.path()),
        size: 9018,
        count: Some(1),
        ..Default::default()
    };
    let err = Generator::bind(&cfg).err().expect("9018 over MTU 1500");
    assert_eq!(
        err.downcast_ref::<FrameExceedsMtu>(),
        Some(&FrameExceedsMtu {
            ifname: "gtap0".into(),
            size: 9018,
            mtu: 1500
        }),
        "{err:#}"
    );
    Generator::bind(&GenConfig {
        size: 1518,
        ..cfg.clone()
    })
    .expect("1518 fits 1500");
    let jumbo = TapNet::create_with_mtu(2, 1, Some(&Mtus::parse("9000").unwrap())).unwrap();
    Generator::bind(&GenConfig {
        netns: Some(jumbo.path()),
        bidir: true,
        ..cfg
    })
    .expect("9018 fits 9000 both ways");
}

#[test]
fn hosts_set_their_own_mtu() {
    require_tap();
    // Gannet's side at 1500, the hosts at 9000.
    let net = TapNet::create_with_mtu(2, 1, Some(&Mtus::parse("1500").unwrap())).unwrap();
    let plan = plan_with_mtu("mode=l2", 2, Some(&Mtus::parse("9000").unwrap())).unwrap();
    let hosts = Hosts::create(&net, &plan).expect("hosts");
    for port in 0..2 {
        let out = hosts
            .exec(port, &["cat", &format!("/sys/class/net/gtap{port}/mtu")])
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "9000");
    }
    assert!(
        hosts.describe().contains(", MTU 9000"),
        "{}",
        hosts.describe()
    );
}
