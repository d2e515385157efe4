//! Tests of the command-line parser.
//!
//! Past ~800 lines because every key's values and refusals (kernel, router, ACL, NF-owned, the
//! boot bundle) are tested against the one parser; split by owner when item 4 of the
//! public-API issue gives each owner its own parser.

use super::*;
use std::format;
use std::string::ToString;

#[test]
fn mtu_keys() {
    assert_eq!(Config::parse("").unwrap().mtu, [None, None]);
    assert_eq!(
        Config::parse("mtu0=9000 mtu1=1500").unwrap().mtu,
        [Some(9000), Some(1500)]
    );
    assert_eq!(Config::parse("mtu1=68").unwrap().mtu, [None, Some(68)]);
    for (bad, key) in [
        ("mtu0=67", "mtu0"),
        ("mtu1=9001", "mtu1"),
        ("mtu0=0", "mtu0"),
        ("mtu0=1500b", "mtu0"),
        ("mtu1=", "mtu1"),
        ("mtu0=65536", "mtu0"),
    ] {
        assert!(
            matches!(
                Config::parse(bad),
                Err(ConfigError::BadValue { key: k, .. }) if k == key
            ),
            "{bad}"
        );
    }
    assert_eq!(
        Config::parse("mtu0=9001").unwrap_err().to_string(),
        "bad value `9001` for key `mtu0`: expected an IP MTU in bytes, 68..=9000"
    );
    assert_eq!(
        Config::parse("mtu0=1500 mtu0=9000"),
        Err(ConfigError::Repeated("mtu0"))
    );
}

#[test]
fn queues_key() {
    assert_eq!(Config::parse("").unwrap().queues, Queues::Auto);
    assert_eq!(Config::parse("queues=auto").unwrap().queues, Queues::Auto);
    assert_eq!(Config::parse("queues=2").unwrap().queues, Queues::Count(2));
    assert_eq!(Config::parse("queues=1").unwrap().queues, Queues::Count(1));
    for bad in [
        "queues=0",
        "queues=17",
        "queues=two",
        "queues=-1",
        "queues=",
    ] {
        assert!(
            matches!(
                Config::parse(bad),
                Err(ConfigError::BadValue { key: "queues", .. })
            ),
            "{bad}"
        );
    }
    // Router mode on several cores: one router per core over one shared FIB.
    assert_eq!(
        Config::parse("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 queues=2")
            .unwrap()
            .queues,
        Queues::Count(2)
    );
    assert_eq!(
        Config::parse("queues=17").unwrap_err().to_string(),
        "bad value `17` for key `queues`: expected auto or an integer in 1..=16"
    );
}

#[test]
fn sim_keys() {
    let c = Config::parse("").unwrap();
    assert_eq!((c.sim, c.sim_iters), (None, DEFAULT_SIM_ITERS));
    let c = Config::parse("sim=4").unwrap();
    assert_eq!((c.sim, c.sim_iters), (Some(4), 1024));
    let c =
        Config::parse("sim=256 sim_iters=32 mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24").unwrap();
    assert_eq!((c.sim, c.sim_iters, c.mode), (Some(256), 32, Mode::Router));
    assert_eq!(
        Config::parse("sim=1 sim_iters=1000000").unwrap().sim_iters,
        1_000_000
    );
    for bad in ["sim=0", "sim=257", "sim=four", "sim=", "sim=-1"] {
        assert!(
            matches!(
                Config::parse(bad),
                Err(ConfigError::BadValue { key: "sim", .. })
            ),
            "{bad}"
        );
    }
    for bad in [
        "sim=1 sim_iters=0",
        "sim=1 sim_iters=1000001",
        "sim=1 sim_iters=x",
    ] {
        assert!(
            matches!(
                Config::parse(bad),
                Err(ConfigError::BadValue {
                    key: "sim_iters",
                    ..
                })
            ),
            "{bad}"
        );
    }
    assert_eq!(c.sim_size, DEFAULT_SIM_SIZE);
    assert_eq!(Config::parse("sim=4 sim_size=9018").unwrap().sim_size, 9018);
    assert_eq!(c.sim_nic, SimNic::Virtio);
    assert_eq!(
        Config::parse("sim=4 sim_nic=dd").unwrap().sim_nic,
        SimNic::Dd
    );
    assert_eq!(
        Config::parse("sim=4 sim_nic=e1000e").unwrap().sim_nic,
        SimNic::E1000e
    );
    assert_eq!(
        Config::parse("sim=4 sim_nic=igb").unwrap().sim_nic,
        SimNic::Igb
    );
    assert!(Config::parse("sim=4 sim_nic=e1000").is_err());
    assert!(Config::parse("sim=4 sim_nic=e1000").is_err());
    assert!(matches!(
        Config::parse("sim_nic=dd").unwrap_err(),
        ConfigError::Missing { key: "sim", .. }
    ));
    for bad in [
        "sim=1 sim_size=63",
        "sim=1 sim_size=9019",
        "sim=1 sim_size=big",
    ] {
        assert!(
            matches!(
                Config::parse(bad),
                Err(ConfigError::BadValue {
                    key: "sim_size",
                    ..
                })
            ),
            "{bad}"
        );
    }
    assert_eq!(
        Config::parse("sim_size=100").unwrap_err(),
        ConfigError::Missing {
            key: "sim",
            because: "for sim_size"
        }
    );
    assert_eq!(
        Config::parse("sim=0").unwrap_err().to_string(),
        "bad value `0` for key `sim`: expected frames per poll iteration, 1..=256"
    );
    assert_eq!(
        Config::parse("sim_iters=10").unwrap_err(),
        ConfigError::Missing {
            key: "sim",
            because: "for sim_iters"
        }
    );
    assert!(matches!(
        Config::parse("sim=4 queues=2"),
        Err(ConfigError::Missing { key: "queues", .. })
    ));
    assert_eq!(Config::parse("sim=4 queues=1").unwrap().sim, Some(4));
    assert_eq!(
        Config::parse("sim=4 sim=8").unwrap_err(),
        ConfigError::Repeated("sim")
    );
}

#[test]
fn empty_is_default() {
    assert_eq!(Config::parse("").unwrap(), Config::default());
    assert_eq!(Config::default().mode, Mode::L2);
    assert_eq!(Config::default().burst, 32);
}

#[test]
fn all_keys() {
    let c = Config::parse(
        "mode=l2  peer0=02:00:00:00:00:aa peer1=02:00:00:00:00:bb burst=64 log=debug",
    )
    .unwrap();
    assert_eq!(c.mode, Mode::L2);
    assert_eq!(c.peer[0].0[5], 0xaa);
    assert_eq!(c.peer[1].0[5], 0xbb);
    assert_eq!(c.burst, 64);
    assert_eq!(c.log, LogLevel::Debug);
    let c = Config::parse("pool=release refill=single").unwrap();
    assert_eq!((c.pool, c.refill), (PoolMode::Release, RefillMode::Single));
    assert!(matches!(
        Config::parse("refill=some"),
        Err(ConfigError::BadValue { key: "refill", .. })
    ));
    assert_eq!(Config::parse("idle=poll").unwrap().idle, IdleMode::Poll);
    assert_eq!(Config::parse("").unwrap().idle, IdleMode::Halt);
    assert!(matches!(
        Config::parse("idle=sleep"),
        Err(ConfigError::BadValue { key: "idle", .. })
    ));
}

#[test]
fn acpi_rsdp() {
    assert_eq!(
        Config::parse("acpi_rsdp=0x9f000").unwrap().acpi_rsdp,
        Some(0x9f000)
    );
    assert_eq!(Config::parse("").unwrap().acpi_rsdp, None);
    for bad in ["0", "0x0", "9f000", "0x9f008", "0x100000000", "0xzz"] {
        assert!(
            matches!(
                Config::parse(&std::format!("acpi_rsdp={bad}")),
                Err(ConfigError::BadValue {
                    key: "acpi_rsdp",
                    ..
                })
            ),
            "acpi_rsdp={bad} accepted"
        );
    }
}

#[test]
fn routes_file() {
    let text = "# core routes\n192.168.0.0/16,10.0.1.2\n\n 0.0.0.0/0,10.0.0.2  # default\n";
    let got: std::vec::Vec<_> = parse_routes_file(text).collect();
    assert_eq!(got.len(), 2);
    let (line, (net, gw)) = got[1].unwrap();
    assert_eq!((line, net.len, gw), (4, 0, Ipv4Addr::new(10, 0, 0, 2)));
    // A mixed file: the IPv6 lines are the IPv6 FIB's, skipped here (issue 37).
    let mixed = "2001:db8:100::/48,2001:db8:1::2
10.1.0.0/16,10.0.1.2
::/0,fe80::1%0 # x
";
    let got: std::vec::Vec<_> = parse_routes_file(mixed).collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].unwrap().0, 2);
    assert_eq!(crate::fib_build::sizing_len("::/0,fe80::1%0"), None);
    let bad: std::vec::Vec<_> =
        parse_routes_file("10.0.0.0/8,10.0.1.2\n10.1.0.0/33,1.2.3.4\n").collect();
    assert_eq!(
        bad[1],
        Err((2, "10.1.0.0/33,1.2.3.4", ParseError::BadPrefixLen))
    );
    let host_bits: std::vec::Vec<_> = parse_routes_file("192.168.1.5/16,10.0.1.2").collect();
    assert_eq!(
        host_bits[0],
        Err((1, "192.168.1.5/16,10.0.1.2", ParseError::HostBitsSet))
    );
    // A line over the cap is bad whatever it holds (a comment too), shown cut; one at the cap
    // is read as usual.
    let at_cap = format!("10.0.0.0/8,10.0.1.2 #{}", "x".repeat(ROUTES_LINE_MAX - 21));
    assert_eq!(at_cap.len(), ROUTES_LINE_MAX);
    let over = format!("# {}", "y".repeat(ROUTES_LINE_MAX - 1));
    let text = format!("{at_cap}\n{over}\n10.1.0.0/16,10.0.1.2\n");
    let got: std::vec::Vec<_> = parse_routes_file(&text).collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].is_ok(), "{got:?}");
    assert_eq!(got[1], Err((2, &over[..40], ParseError::LineTooLong)));
    assert_eq!(
        ParseError::LineTooLong.to_string(),
        "line longer than 512 bytes"
    );
}

#[test]
fn router_keys() {
    let c = Config::parse(
        "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 \
         route=192.168.0.0/16,10.0.1.2 route=0.0.0.0/0,10.0.0.2",
    )
    .unwrap();
    assert_eq!(c.mode, Mode::Router);
    assert_eq!(c.ip[0].unwrap().to_string(), "10.0.0.1/24");
    assert_eq!(c.router.routes.len(), 2);
    assert_eq!(c.router.routes[0].1, Ipv4Addr::new(10, 0, 1, 2));
    assert_eq!(
        Config::parse("mode=router ip0=10.0.0.1/24").unwrap_err(),
        ConfigError::Missing {
            key: "ip1",
            because: "with mode=router"
        }
    );
    assert!(matches!(
        Config::parse("mode=router ip0=10.0.0.1"),
        Err(ConfigError::BadValue { key: "ip0", .. })
    ));
    assert_eq!(c.mgmt_port(), Some(0));
    assert_eq!(Config::parse("mode=l2").unwrap().mgmt_port(), None);
    assert!(matches!(
        Config::parse("mode=router route=10.0.0.0/8"),
        Err(ConfigError::BadValue { key: "route", .. })
    ));
    assert_eq!(
        Config::parse("route=192.168.0.0/16,10.0.1.2").unwrap_err(),
        ConfigError::Misplaced {
            key: "route",
            modes: &[Mode::Router],
            mode: Mode::L2,
        }
    );
}

/// Issue 40 item 1: `route=` is checked against `ip0=`/`ip1=` when the line is parsed (it was
/// first checked at the FIB build), whatever order the keys come in; a prefix twice is a
/// duplicate naming both keys' places; a later layer's override is not parsed here.
#[test]
fn route_keys_checked_against_the_ports() {
    let r = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";
    let e = Config::parse(
        "mode=router route=192.168.0.0/16,10.0.1.255 ip0=10.0.0.1/24 ip1=10.0.1.1/24",
    )
    .unwrap_err();
    assert_eq!(e.key(), Some("route"));
    assert_eq!(
        e.to_string(),
        "route=192.168.0.0/16,10.0.1.255: gateway is the broadcast address of connected network 10.0.1.0/24"
    );
    let line = format!("{r} route=10.0.0.0/24,10.0.1.2");
    assert_eq!(
        Config::parse(&line).unwrap_err().to_string(),
        "route=10.0.0.0/24,10.0.1.2: the prefix is a connected network, a port address or a broadcast address (routes may only be more specific)"
    );
    let line = format!("{r} route=127.0.0.0/8,10.0.1.2");
    assert!(matches!(
        Config::parse(&line),
        Err(ConfigError::BadRoute {
            why: RouteError::Loopback,
            ..
        })
    ));
    let line =
        format!("{r} route=1.0.0.0/8,10.0.1.2 route=2.0.0.0/8,10.0.1.2 route=1.0.0.0/8,10.0.0.2");
    assert_eq!(
        Config::parse(&line).unwrap_err().to_string(),
        "route=1.0.0.0/8,10.0.0.2: duplicate prefix 1.0.0.0/8 (first at 1): one route per prefix in a routes file, body, the route= keys or the pending changes"
    );
    let line =
        format!("{r} route=0.0.0.0/1,10.0.1.2 route=192.0.0.0/2,10.0.0.2 route=0.0.0.0/0,10.0.1.3");
    assert_eq!(Config::parse(&line).unwrap().router.routes.len(), 3);
}

/// Issue 37: the ports' IPv6 addresses (`ip6_0=`, `ip6_1=`, the router's keys) and IPv6
/// `route=`s; bad ones refused at boot by name: a /128 port address, an IPv6 port's MTU below
/// 1,280, a link-local gateway without its port (or naming a port without IPv6), one address
/// on both ports.
#[test]
fn ipv6_router_keys() {
    let r = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";
    let v6 = format!("{r} ip6_0=2001:db8::1/64 ip6_1=2001:db8:1::1/64");
    let c = Config::parse(&format!(
        "{v6} route=2001:db8:100::/48,2001:db8:1::2 route=::/0,fe80::1%0 route=10.9.0.0/16,10.0.1.2"
    ))
    .unwrap();
    assert_eq!(c.router.ip6[0].unwrap().to_string(), "2001:db8::1/64");
    assert_eq!(c.router.ip6[1].unwrap().to_string(), "2001:db8:1::1/64");
    assert_eq!((c.router.routes.len(), c.router.routes6.len()), (1, 2));
    assert_eq!(c.router.routes6[1].port, Some(0));
    assert_eq!(Config::parse(r).unwrap().router.ip6, [None, None]);
    // The key the error names, and its text.
    fn err(line: &str) -> (Option<std::string::String>, std::string::String) {
        let e = Config::parse(line).unwrap_err();
        (e.key().map(|k| k.to_string()), e.to_string())
    }
    let key = |k: &str| Some(k.to_string());
    let e = err(&format!("{r} ip6_0=2001:db8::1/128 ip6_1=2001:db8:1::1/64"));
    assert_eq!(e.0, key("ip6_0"));
    assert!(
        e.1.contains("a /128 leaves the port no connected prefix"),
        "{}",
        e.1
    );
    let e = err(&format!("{r} ip6_0=fe80::1/64"));
    assert_eq!(e.0, key("ip6_0"));
    let e = err(&format!("{v6} mtu1=1279"));
    assert_eq!(e.0, key("mtu1"));
    assert_eq!(
        e.1,
        "key `mtu1`: mtu1=1279 is below IPv6's minimum link MTU of 1280 (RFC 8200 §5) with ip6_1="
    );
    assert!(
        Config::parse(&format!("{r} mtu1=1279")).is_ok(),
        "no IPv6: no minimum"
    );
    assert!(Config::parse(&format!("{v6} mtu1=1280")).is_ok());
    let e = err(&format!("{v6} route=::/0,fe80::1"));
    assert_eq!(e.0, key("route"));
    assert_eq!(
        e.1,
        "bad value `::/0,fe80::1` for key `route`: expected a link-local gateway names its port (fe80::1%PORT)"
    );
    let e = err(&format!("{v6} route=::/0,fe80::1%2"));
    assert_eq!(
        e.1,
        "route=::/0,fe80::1%2: zone %2 names no port with an ip6_2="
    );
    let e = err(&format!("{r} route=::/0,2001:db8::2"));
    assert_eq!(e.0, key("route"));
    assert_eq!(
        e.1,
        "route=::/0,2001:db8::2: gateway inside no port's ip6_N= prefix"
    );
    let e = err(&format!("{r} ip6_0=2001:db8::1/64 ip6_1=2001:db8::1/64"));
    assert_eq!(
        e,
        (
            key("ip6_1"),
            "key `ip6_1`: ip6_1= is ip6_0='s address".to_string()
        )
    );
    let e = err(&format!("{r} ip6_0=2001:db8::1/64"));
    assert_eq!(e.0, key("ip6_1"));
    assert_eq!(
        Config::parse("mode=l2 ip6_0=2001:db8::1/64").unwrap_err(),
        ConfigError::Misplaced {
            key: "ip6_0",
            modes: &[Mode::Router],
            mode: Mode::L2,
        }
    );
    // Router Advertisements: off unless `ra6=on`, which needs the IPv6 ports.
    assert!(!Config::parse(&v6).unwrap().router.ra6);
    assert!(Config::parse(&format!("{v6} ra6=on")).unwrap().router.ra6);
    let e = err(&format!("{r} ra6=on"));
    assert_eq!(e.0, key("ip6_0"));
    assert!(e.1.contains("for ra6=on"), "{}", e.1);
    let e = err(&format!("{v6} ra6=yes"));
    assert_eq!(e.0, key("ra6"));
    assert!(e.1.contains("expected on or off"), "{}", e.1);
}

/// Issue 33 item 6: `ip0=`/`ip1=`/`mgmt=` are the kernel's (the management plane serves every
/// network function); outside the router an address is the management address only.
/// (Issue 15 item 8 had refused them outside router mode, where they were silently ignored.)
#[test]
fn port_addresses_are_the_management_planes_in_every_mode() {
    for (line, port) in [
        ("ip0=10.0.0.1/24", Some(0)),
        ("mode=l2 ip1=10.0.1.1/24", Some(1)),
        ("mode=io ip0=10.0.0.1/24 ip1=10.0.1.1/24", Some(0)),
        ("mode=io ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=ip1", Some(1)),
        ("mode=l2 ip0=10.0.0.1/24 mgmt=none", None),
        ("mode=l2", None),
        (
            "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=ip1",
            Some(1),
        ),
        (
            "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=none",
            None,
        ),
    ] {
        let c = Config::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(c.mgmt_port(), port, "{line}");
    }
    for (line, key) in [
        ("mgmt=ip1", "ip1"),
        ("mode=io ip1=10.0.1.1/24 mgmt=ip0", "ip0"),
    ] {
        let e = Config::parse(line).unwrap_err();
        assert_eq!(
            e,
            ConfigError::Missing {
                key,
                because: "for its management address (mgmt=)"
            },
            "{line}"
        );
        assert!(e.to_string().contains(key), "{line}: {e}");
    }
}

#[test]
fn errors_name_the_key() {
    let e = Config::parse("mode=bridge").unwrap_err();
    assert_eq!(
        e,
        ConfigError::BadValue {
            key: "mode",
            value: "bridge",
            expected: "io, l2, router, acl, nat or firewall"
        }
    );
    assert!(e.to_string().contains("`mode`"));
    assert_eq!(
        Config::parse("burst=0").unwrap_err().to_string(),
        "bad value `0` for key `burst`: expected an integer in 1..=256"
    );
    assert!(matches!(
        Config::parse("burst=257"),
        Err(ConfigError::BadValue { key: "burst", .. })
    ));
    assert!(matches!(
        Config::parse("peer1=zz"),
        Err(ConfigError::BadValue { key: "peer1", .. })
    ));
    assert_eq!(
        Config::parse("speed=10").unwrap_err(),
        ConfigError::UnknownKey("speed")
    );
    assert_eq!(
        Config::parse("mode=l2 mode=io").unwrap_err(),
        ConfigError::Repeated("mode")
    );
    assert_eq!(
        Config::parse("quiet").unwrap_err(),
        ConfigError::NotKeyValue("quiet")
    );
}

#[test]
fn virtio_mmio_devices() {
    let c = Config::parse(
        "virtio_mmio.device=512@0xfeb00e00:12 mode=io virtio_mmio.device=4K@0xfeb01000:13:2",
    )
    .unwrap();
    assert_eq!(
        c.virtio_mmio.as_slice(),
        &[
            MmioDevice {
                size: 512,
                addr: 0xfeb0_0e00,
                irq: 12
            },
            MmioDevice {
                size: 4096,
                addr: 0xfeb0_1000,
                irq: 13
            },
        ]
    );
    assert!(Config::parse("").unwrap().virtio_mmio.is_empty());
    for bad in [
        "512",
        "512@0xfeb00e00",
        "512@0xfeb00e00:x",
        "0x80@0xfeb00e00:12",
        "2M@0xfeb00e00:12",
        "512@0xfeb00e01:12",
        "512@0:12",
        "512@0xfffffff0:12",
        "512@0xfeb00e00:12:z",
        "512@zz:12",
    ] {
        let line = format!("virtio_mmio.device={bad}");
        assert!(
            matches!(
                Config::parse(&line),
                Err(ConfigError::BadValue {
                    key: "virtio_mmio.device",
                    ..
                })
            ),
            "{bad}"
        );
    }
    let many = "virtio_mmio.device=512@0xfeb00e00:12 ".repeat(MAX_MMIO_DEVICES + 1);
    assert_eq!(
        Config::parse(&many).unwrap_err(),
        ConfigError::TooManyMmioDevices
    );
}

#[test]
fn tlb_keys_parse_and_are_checked() {
    let c = Config::parse("").unwrap();
    assert_eq!(
        (c.tlb, c.tlb_ceiling, c.tlbtest, c.tlbtest_skip),
        (TlbMode::Batch, 33, None, false)
    );
    assert!(Config::parse("backpressure=on").unwrap().backpressure);
    assert!(!Config::parse("").unwrap().backpressure);
    assert!(matches!(
        Config::parse("backpressure=1"),
        Err(ConfigError::BadValue {
            key: "backpressure",
            ..
        })
    ));
    assert!(Config::parse("guard=on").unwrap().guard);
    assert!(!Config::parse("").unwrap().guard);
    assert!(matches!(
        Config::parse("guard=yes"),
        Err(ConfigError::BadValue { key: "guard", .. })
    ));
    let c = Config::parse("tlb=immediate tlb_ceiling=8 tlbtest=1000 tlbtest_skip=on").unwrap();
    assert_eq!(
        (c.tlb, c.tlb_ceiling, c.tlbtest, c.tlbtest_skip),
        (TlbMode::Immediate, 8, Some(1000), true)
    );
    for (bad, key) in [
        ("tlb=lazy", "tlb"),
        ("tlb_ceiling=0", "tlb_ceiling"),
        ("tlb_ceiling=65", "tlb_ceiling"),
        ("tlbtest=0", "tlbtest"),
        ("tlbtest=1 tlbtest_skip=yes", "tlbtest_skip"),
    ] {
        assert!(
            matches!(Config::parse(bad), Err(ConfigError::BadValue { key: k, .. }) if k == key),
            "{bad}: {:?}",
            Config::parse(bad)
        );
    }
    assert!(matches!(
        Config::parse("tlbtest_skip=on"),
        Err(ConfigError::Missing { key: "tlbtest", .. })
    ));
    assert!(matches!(
        Config::parse("tlbtest=10 sim=4"),
        Err(ConfigError::Missing { key: "sim", .. })
    ));
}

#[test]
fn debug_exit_key() {
    assert!(!Config::parse("").unwrap().debug_exit);
    assert!(Config::parse("debug_exit=on mode=io").unwrap().debug_exit);
    assert!(!Config::parse("debug_exit=off").unwrap().debug_exit);
    assert!(Config::parse("debug_exit=1").is_err());
    assert_eq!(
        Config::parse("debug_exit=on debug_exit=on"),
        Err(ConfigError::Repeated("debug_exit"))
    );
}

#[test]
fn burstin_key() {
    assert!(!Config::parse("").unwrap().burstin);
    assert!(Config::parse("burstin=on mode=io").unwrap().burstin);
    assert!(!Config::parse("burstin=off").unwrap().burstin);
    for bad in ["burstin=1", "burstin=", "burstin=On"] {
        assert!(
            matches!(
                Config::parse(bad),
                Err(ConfigError::BadValue {
                    key: "burstin",
                    expected: "on or off",
                    ..
                })
            ),
            "{bad}: {:?}",
            Config::parse(bad)
        );
    }
    assert_eq!(
        Config::parse("burstin=on burstin=off"),
        Err(ConfigError::Repeated("burstin"))
    );
    assert!(matches!(
        Config::parse("burstin=on sim=32"),
        Err(ConfigError::Missing { key: "sim", .. })
    ));
}

#[test]
fn fault_key_parses_names_and_periods_and_names_bad_ones() {
    use mm::fault::Fault;
    let c = Config::parse("fault=rx_bad_id:50000,dma_map:64").unwrap();
    assert_eq!(c.faults[Fault::RxBadId as usize], 50_000);
    assert_eq!(c.faults[Fault::DmaMap as usize], 64);
    assert_eq!(c.faults.iter().filter(|&&n| n > 0).count(), 2);
    assert_eq!(Config::parse("").unwrap().faults, [0; mm::fault::FAULTS]);
    for bad in [
        "fault=rx_bad_id",
        "fault=nope:5",
        "fault=dma_map:0",
        "fault=dma_map:1000000001",
        "fault=dma_map:x",
        "fault=dma_map:5,",
    ] {
        match Config::parse(bad) {
            Err(ConfigError::BadValue { key: "fault", .. }) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn mgmt_token() {
    let r = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";
    let c = Config::parse(r).unwrap();
    assert_eq!(c.mgmt_token, None);
    let tok = "s3cret-Token_0123456789";
    let line = format!("{r} mgmt_token={tok}");
    let c = Config::parse(&line).unwrap();
    let t = c.mgmt_token.clone().unwrap();
    assert!(t.matches(tok.as_bytes()));
    assert!(!t.matches(b"s3cret-Token_0123456788"));
    assert!(!t.matches(b"s3cret"));
    // Never printed: neither by Config's Debug nor in the logged command line.
    assert!(!format!("{c:?}").contains(tok));
    let shown = RedactedCmdline(&line).to_string();
    assert!(!shown.contains(tok), "{shown}");
    assert!(shown.ends_with("mgmt_token=<23 bytes>"), "{shown}");
    for bad in [
        "short",
        &"x".repeat(65),
        "with\u{7f}del-0123456789",
        "é-0123456789abcdef",
    ] {
        let line = format!("{r} mgmt_token={bad}");
        let e = Config::parse(&line).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::BadValue {
                    key: "mgmt_token",
                    value: "<redacted>",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(!e.to_string().contains(bad));
    }
    assert!(Config::parse(&"x".repeat(16)).is_err());
    assert_eq!(
        Config::parse(&format!("mgmt_token={}", "x".repeat(16))).unwrap_err(),
        ConfigError::Misplaced {
            key: "mgmt_token",
            modes: &[Mode::Router, Mode::Acl, Mode::Firewall, Mode::Nat],
            mode: Mode::L2,
        }
    );
    // The ACL's `PUT /rules` takes the same token.
    let c = Config::parse(&format!("mode=acl ip0=10.0.0.1/24 mgmt_token={tok}")).unwrap();
    assert!(c.mgmt_token.unwrap().matches(tok.as_bytes()));
}

/// Issue 33 item 4: keys are looked up by name in their owner's set; a network function's key
/// under another mode is refused by name, whatever the order of the tokens.
#[test]
fn keys_belong_to_their_owner() {
    // Each key once, each set's keys distinct from every other's.
    let mut names: std::vec::Vec<&str> = owners::KEY_SETS.iter().flat_map(|s| s.names()).collect();
    assert_eq!(names.len(), owners::KEY_COUNT);
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), owners::KEY_COUNT, "a key is in two sets");
    // A router key before `mode=router` is fine; after `mode=l2` it is misplaced.
    let c = Config::parse("ip0=10.0.0.1/24 ip1=10.0.1.1/24 mode=router").unwrap();
    assert_eq!(c.mode, Mode::Router);
    let e = Config::parse("mode=io peer0=02:00:00:00:00:aa").unwrap_err();
    assert_eq!(
        e,
        ConfigError::Misplaced {
            key: "peer0",
            modes: &[Mode::L2, Mode::Nat],
            mode: Mode::Io,
        }
    );
    assert_eq!(
        e.to_string(),
        "key `peer0` belongs to mode=l2 or mode=nat, not mode=io"
    );
    let e = Config::parse("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 xcore=on").unwrap_err();
    assert_eq!(
        e.to_string(),
        "key `xcore` belongs to mode=io or mode=l2, not mode=router"
    );
    // The kernel's keys go with every mode.
    for mode in ["io", "l2", "router ip0=10.0.0.1/24 ip1=10.0.1.1/24"] {
        assert!(Config::parse(&format!("mode={mode} burst=8 tlb=immediate guard=on")).is_ok());
    }
    // An unknown key lists every known one, the network functions' under their modes.
    let e = Config::parse("speed=10G").unwrap_err().to_string();
    assert!(
        e.starts_with("unknown key `speed` (the kernel's: mode "),
        "{e}"
    );
    assert!(e.contains("; mode=router: route ip6_0 ip6_1 ra6;"), "{e}");
    for set in owners::KEY_SETS {
        for name in set.names() {
            assert!(e.contains(&format!(" {name}")), "{e}");
        }
    }
}

/// An image's own network function for the tests of [`nf_keys`]: a port and a list of
/// addresses.
#[derive(Default, Debug)]
struct Filter {
    port: u16,
    allow: std::vec::Vec<std::string::String>,
}

const FILTER_KEYS: &[nf_keys::NfKey<Filter>] = &[
    nf_keys::NfKey::new("blocked_port", |f, v| {
        f.port = v
            .parse()
            .map_err(|_| keys::KeyError::Expected("a port number in 0..=65535"))?;
        Ok(())
    }),
    nf_keys::NfKey::repeated("allow", |f, v| {
        f.allow.push(v.to_string());
        Ok(())
    }),
];

fn parse_filter(line: &str) -> Result<(Config, nf_keys::NfArgs, Filter), ConfigError<'_>> {
    let mut f = Filter::default();
    let mut table = nf_keys::KeyTable {
        keys: FILTER_KEYS,
        state: &mut f,
    };
    let keys = nf_keys::NfKeys {
        nf: "filter",
        keys: &mut table,
    };
    let (c, args) = Config::parse_with(line, Some(keys))?;
    Ok((c, args, f))
}

/// Issue 33 item 4: an image's own network function declares its keys; the kernel parses its
/// own, checks the NF's by name (unknown, repeated, bad value: each named) and keeps the NF's
/// tokens for every core to apply.
#[test]
fn a_network_function_declares_its_own_keys() {
    let (c, args, f) =
        parse_filter("burst=8 blocked_port=5001 allow=a allow=b tlb=immediate").unwrap();
    assert_eq!((c.burst, c.tlb), (8, TlbMode::Immediate));
    assert_eq!((f.port, f.allow.len()), (5001, 2));
    assert_eq!(args.as_str(), "blocked_port=5001 allow=a allow=b");
    // What a core does with them: the same values on a fresh NF.
    let mut g = Filter::default();
    let mut table = nf_keys::KeyTable {
        keys: FILTER_KEYS,
        state: &mut g,
    };
    nf_keys::apply(&args, &mut table).unwrap();
    assert_eq!((g.port, g.allow), (5001, f.allow));
    // Named errors.
    let e = parse_filter("blocked_port=http").unwrap_err();
    assert_eq!(
        e.to_string(),
        "bad value `http` for key `blocked_port`: expected a port number in 0..=65535"
    );
    assert_eq!(
        parse_filter("blocked_port=1 blocked_port=2").unwrap_err(),
        ConfigError::Repeated("blocked_port")
    );
    assert_eq!(
        parse_filter("blocked=1").unwrap_err(),
        ConfigError::UnknownKey("blocked")
    );
    // The stock NFs' keys configure nothing here: refused by name; the kernel's stay.
    let e = parse_filter("mode=l2 peer0=02:00:00:00:00:aa").unwrap_err();
    assert_eq!(
        e.to_string(),
        "key `peer0` belongs to the stock image's mode=l2 or mode=nat; this image runs `filter`"
    );
    assert!(parse_filter("mode=io ip0=10.0.0.1/24 mgmt=ip0").is_ok());
    // The `PUT` token is the management plane's for the NF's own files too.
    let tok = "x".repeat(16);
    let (c, args, _) = parse_filter(&std::format!("ip0=10.0.0.1/24 mgmt_token={tok}")).unwrap();
    assert_eq!(
        (c.mgmt_token.map(|t| t.len()), args.as_str()),
        (Some(16), "")
    );
    // No stock NF runs here, so none of their checks does (the stock router needs ip0/ip1,
    // the NAT a pool, the firewall one queue pair); the kernel's still do.
    for line in ["mode=router", "mode=nat", "mode=firewall queues=2"] {
        assert!(parse_filter(line).is_ok(), "{line}");
        assert!(Config::parse(line).is_err(), "{line}");
    }
    assert_eq!(
        parse_filter("mgmt=ip1").unwrap_err().key(),
        Some("ip1"),
        "the kernel's check"
    );
    // The stock image does not know the NF's keys.
    assert_eq!(
        Config::parse("blocked_port=1").unwrap_err(),
        ConfigError::UnknownKey("blocked_port")
    );
    let (_, args) = Config::parse_with("burst=8", None).unwrap();
    assert_eq!(args.as_str(), "");
    // Too many tokens for the core's copy: named.
    let long = std::format!("allow={}", "x".repeat(nf_keys::NF_ARGS_MAX));
    assert!(matches!(
        parse_filter(&long).unwrap_err(),
        ConfigError::TooLong { key: "allow", .. }
    ));
    // An NF key that is the kernel's: its table is wrong, said at boot.
    const SHADOW: &[nf_keys::NfKey<Filter>] = &[nf_keys::NfKey::new("burst", |_, _| Ok(()))];
    let mut f = Filter::default();
    let mut table = nf_keys::KeyTable {
        keys: SHADOW,
        state: &mut f,
    };
    let keys = nf_keys::NfKeys {
        nf: "filter",
        keys: &mut table,
    };
    assert_eq!(
        Config::parse_with("", Some(keys)).unwrap_err(),
        ConfigError::NfKeyShadowed {
            key: "burst",
            nf: "filter"
        }
    );
}

/// `sim_ip=6`: the benchmark's IPv6 frames, only where the router forwards IPv6.
#[test]
fn sim_ip_key() {
    let v6 = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 ip6_0=2001:db8::1/64 ip6_1=2001:db8:0:1::1/64 route=2001:db8:100::/48,2001:db8:0:1::2 sim=4";
    let c = Config::parse(&format!("{v6} sim_ip=6 sim_size=78")).unwrap();
    assert!(c.sim_ipv6);
    assert!(!Config::parse(v6).unwrap().sim_ipv6);
    let key = |line: &str| {
        Config::parse(line)
            .unwrap_err()
            .key()
            .map(ToString::to_string)
    };
    assert_eq!(key(&format!("{v6} sim_ip=6")).as_deref(), Some("sim_size"));
    assert_eq!(key(&format!("{v6} sim_ip=5")).as_deref(), Some("sim_ip"));
    assert_eq!(key("mode=l2 sim=4 sim_ip=6").as_deref(), Some("sim_ip"));
    assert_eq!(key("mode=l2 sim_ip=4").as_deref(), Some("sim"));
}
