//! The kernel command line of one forwarding mode, as the benchmarks, the soak and the fault
//! run boot it: the user's `--append` with the mode set, and for the router the port addresses
//! the generator's hosts (10.0.0.2, 10.0.1.2) and the Linux peer expect.

/// Gannet's `--append` with any `mode=` dropped and `mode=<mode>` added.
pub fn gannet_append(user: &str, mode: &str) -> String {
    let mut v: Vec<&str> = user
        .split_whitespace()
        .filter(|kv| !kv.starts_with("mode="))
        .collect();
    let m = format!("mode={mode}");
    v.insert(0, &m);
    let mut s = v.join(" ");
    if mode == "router" {
        // The port addresses the Linux peer uses; the generator's hosts are 10.0.0.2 and
        // 10.0.1.2 (it answers the router's ARP requests).
        for (k, a) in [("ip0", "10.0.0.1/24"), ("ip1", "10.0.1.1/24")] {
            if !user
                .split_whitespace()
                .any(|kv| kv.starts_with(&format!("{k}=")))
            {
                s += &format!(" {k}={a}");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::gannet_append;

    #[test]
    fn mode_replaced_and_router_addresses_added_unless_given() {
        assert_eq!(gannet_append("mode=io burst=8", "l2"), "mode=l2 burst=8");
        assert_eq!(gannet_append("", "io"), "mode=io");
        assert_eq!(
            gannet_append("idle=poll", "router"),
            "mode=router idle=poll ip0=10.0.0.1/24 ip1=10.0.1.1/24"
        );
        assert_eq!(
            gannet_append("ip0=10.0.0.1/16", "router"),
            "mode=router ip0=10.0.0.1/16 ip1=10.0.1.1/24"
        );
    }
}
