//! The rules file: fields, defaults, every error by line, the printed form.

use super::*;
use crate::acl::rules::parse_line;

#[test]
fn fields_words_and_defaults() {
    let rule = |l| match parse_line(l).unwrap() {
        Some(RuleLine::Rule(r)) => r,
        other => panic!("{l}: {other:?}"),
    };
    assert_eq!(rule("allow"), Rule::any(Action::Allow));
    assert_eq!(
        rule("deny src any dst any proto any"),
        Rule::any(Action::Deny)
    );
    assert_eq!(
        rule("deny proto udp sport any dport any"),
        Rule {
            proto: Proto::Is(IPPROTO_UDP),
            ..Rule::any(Action::Deny)
        }
    );
    // Fields in any order, tabs, a trailing comment; protocol numbers.
    let r = rule("\tallow dport 0-1023\tproto 6 dst 10.1.0.0/16 src 1.2.3.4/32 # x");
    assert_eq!(r.proto, Proto::Is(IPPROTO_TCP));
    assert_eq!(r.dport, PortRange { lo: 0, hi: 1023 });
    assert_eq!((r.src, r.dst), (net("1.2.3.4/32"), net("10.1.0.0/16")));
    assert_eq!(rule("allow proto 255").proto, Proto::Is(255));
    assert_eq!(rule("allow proto 0").proto, Proto::Is(0));
    assert_eq!(rule("allow proto icmp").proto, Proto::Is(IPPROTO_ICMP));
    assert_eq!(
        rule("allow proto udp sport 7-7").sport,
        PortRange { lo: 7, hi: 7 }
    );
    assert_eq!(rule("allow proto tcp dport 0-65535").dport, PortRange::ANY);
    for blank in ["", "   ", "# only a comment", "  \t # x"] {
        assert_eq!(parse_line(blank), Ok(None), "{blank:?}");
    }
    assert_eq!(
        parse_line("default allow # open"),
        Ok(Some(RuleLine::Default(Action::Allow)))
    );
    // Without a default line the default is deny; a default line anywhere sets it.
    let mut s = Store::for_text("allow proto icmp\n");
    assert_eq!(
        s.build("allow proto icmp\n").unwrap().default_action(),
        Action::Deny
    );
    let text = "allow proto icmp\n\ndefault allow\n";
    let mut s = Store::for_text(text);
    let acl = s.build(text).unwrap();
    assert_eq!(acl.default_action(), Action::Allow);
    assert_eq!(
        acl.classify(&ft([1, 1, 1, 1], [2, 2, 2, 2], 6, 1, 2)),
        Match {
            rule: None,
            action: Action::Allow
        }
    );
    // An empty file: no rule, everything denied.
    let mut s = Store::for_text("");
    let acl = s.build("").unwrap();
    assert!(acl.is_empty());
    assert_eq!(acl.tuple_count(), 0);
    assert_eq!(
        acl.classify(&ft([1, 1, 1, 1], [2, 2, 2, 2], 6, 1, 2))
            .action,
        Action::Deny
    );
}

#[test]
fn every_bad_line_is_an_error_naming_it() {
    // (line, the error, its message): each as line 3 of a file, after a comment and a rule.
    let cases: &[(&str, RuleError, &str)] = &[
        (
            "permit src 10.0.0.0/8",
            RuleError::BadAction("permit"),
            "expected allow, deny or default, found `permit`",
        ),
        (
            "Allow",
            RuleError::BadAction("Allow"),
            "expected allow, deny or default, found `Allow`",
        ),
        (
            "default",
            RuleError::BadDefault(""),
            "default needs allow or deny",
        ),
        (
            "default drop",
            RuleError::BadDefault("drop"),
            "default takes allow or deny, found `drop`",
        ),
        (
            "default deny src 10.0.0.0/8",
            RuleError::Extra("src"),
            "unexpected `src` after the default's action",
        ),
        (
            "allow from 10.0.0.0/8",
            RuleError::UnknownField("from"),
            "unknown field `from` (fields: src, dst, proto, sport, dport)",
        ),
        (
            "allow src",
            RuleError::MissingValue("src"),
            "`src` without a value",
        ),
        (
            "allow proto tcp dport",
            RuleError::MissingValue("dport"),
            "`dport` without a value",
        ),
        (
            "allow src 10.0.0.0/8 src 11.0.0.0/8",
            RuleError::Repeated("src"),
            "`src` given twice",
        ),
        (
            "allow proto tcp proto udp",
            RuleError::Repeated("proto"),
            "`proto` given twice",
        ),
        (
            "allow src 10.0.0.0",
            RuleError::BadPrefix {
                field: "src",
                value: "10.0.0.0",
                why: ParseError::MissingPrefixLen,
            },
            "src `10.0.0.0`: expected A.B.C.D/LEN",
        ),
        (
            "allow dst 10.0.0.256/24",
            RuleError::BadPrefix {
                field: "dst",
                value: "10.0.0.256/24",
                why: ParseError::BadAddress,
            },
            "dst `10.0.0.256/24`: not an IPv4 address (dotted decimal)",
        ),
        (
            "allow dst 10.0.0.0/33",
            RuleError::BadPrefix {
                field: "dst",
                value: "10.0.0.0/33",
                why: ParseError::BadPrefixLen,
            },
            "dst `10.0.0.0/33`: prefix length must be 0..=32",
        ),
        (
            "allow src 10.0.0.1/8",
            RuleError::BadPrefix {
                field: "src",
                value: "10.0.0.1/8",
                why: ParseError::HostBitsSet,
            },
            "src `10.0.0.1/8`: prefix has host bits set",
        ),
        (
            "allow src ::/0",
            RuleError::Ipv6 {
                field: "src",
                value: "::/0",
            },
            "src `::/0`: IPv6 prefixes are not supported yet",
        ),
        (
            "deny dst 2001:db8::/32",
            RuleError::Ipv6 {
                field: "dst",
                value: "2001:db8::/32",
            },
            "dst `2001:db8::/32`: IPv6 prefixes are not supported yet",
        ),
        (
            "allow proto sctp",
            RuleError::BadProto("sctp"),
            "proto `sctp`: expected tcp, udp, icmp, any or a number 0..=255",
        ),
        ("allow proto 256", RuleError::BadProto("256"), ""),
        ("allow proto +6", RuleError::BadProto("+6"), ""),
        ("allow proto TCP", RuleError::BadProto("TCP"), ""),
        (
            "allow proto tcp dport 65536",
            RuleError::BadPorts {
                field: "dport",
                value: "65536",
            },
            "dport `65536`: expected N, N-M (0..=65535, N <= M) or any",
        ),
        (
            "allow proto tcp sport 90-80",
            RuleError::BadPorts {
                field: "sport",
                value: "90-80",
            },
            "",
        ),
        (
            "allow proto tcp sport 80-",
            RuleError::BadPorts {
                field: "sport",
                value: "80-",
            },
            "",
        ),
        (
            "allow proto tcp sport -80",
            RuleError::BadPorts {
                field: "sport",
                value: "-80",
            },
            "",
        ),
        (
            "allow proto udp dport 1-2-3",
            RuleError::BadPorts {
                field: "dport",
                value: "1-2-3",
            },
            "",
        ),
        (
            "allow dport 80",
            RuleError::PortsNeedTcpUdp("dport"),
            "`dport` needs proto tcp or proto udp",
        ),
        (
            "allow proto icmp sport 1",
            RuleError::PortsNeedTcpUdp("sport"),
            "`sport` needs proto tcp or proto udp",
        ),
        (
            "allow proto any dport 0-10",
            RuleError::PortsNeedTcpUdp("dport"),
            "",
        ),
    ];
    for &(line, error, message) in cases {
        assert_eq!(parse_line(line), Err(error), "{line}");
        if !message.is_empty() {
            assert_eq!(error.to_string(), message, "{line}");
        }
        let text = std::format!("# acl\nallow proto icmp\n{line}\nallow\n");
        let e = AclError::Line { line: 3, error };
        assert_eq!(Acl::sizes(&text), Err(e), "{line}");
        let mut s = Store::new(Sizes::for_rules(3));
        assert_eq!(s.build(&text).unwrap_err(), e, "{line}");
        // The parser stops at the first error.
        let items: Vec<_> = parse_rules(&text).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1], Err(e));
    }
    let e = AclError::Line {
        line: 3,
        error: RuleError::BadAction("permit"),
    };
    assert_eq!(
        e.to_string(),
        "rules line 3: expected allow, deny or default, found `permit`"
    );
}

#[test]
fn errors_that_span_lines() {
    let text = "default deny\nallow\n\ndefault allow\n";
    let e = AclError::Line {
        line: 4,
        error: RuleError::RepeatedDefault(1),
    };
    assert_eq!(Acl::sizes(text), Err(e));
    assert_eq!(
        e.to_string(),
        "rules line 4: a second default line (the first is line 1)"
    );
    // MAX_RULES rules build; one more is refused on its own line.
    let mut text = String::from("# many\n\ndefault allow\n");
    for i in 0..MAX_RULES {
        text += &std::format!("deny src {}.{}.0.0/16\n", i / 256, i % 256);
    }
    let sizes = Acl::sizes(&text).unwrap();
    assert_eq!(
        sizes,
        Sizes {
            rules: MAX_RULES,
            tuples: 1,
            groups: MAX_RULES / 4,
            // Per side: 20,001 intervals, 2^14 buckets, 10,001 one-word bitsets.
            prune: 2 * (20_001 + 16_384 + 10_001),
        }
    );
    text += "allow\n";
    let e = AclError::Line {
        line: MAX_RULES + 4,
        error: RuleError::TooManyRules,
    };
    assert_eq!(Acl::sizes(&text), Err(e));
    assert_eq!(e.to_string(), "rules line 10004: more than 10000 rules");
}

#[test]
fn rules_print_in_the_file_syntax() {
    let (rules, _) = parsed(EXAMPLE);
    let printed: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        printed,
        [
            "deny src 192.0.2.0/24",
            "allow dst 198.51.100.0/24 proto tcp dport 80",
            "allow dst 198.51.100.0/24 proto tcp dport 443",
            "allow src 10.0.0.0/8 proto udp sport 1024-65535 dport 53",
            "allow proto icmp",
        ]
    );
    assert_eq!(
        Rule {
            proto: Proto::Is(47),
            ..Rule::any(Action::Deny)
        }
        .to_string(),
        "deny proto 47"
    );
}
