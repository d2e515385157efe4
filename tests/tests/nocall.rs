//! No indirect call per packet (issue 33, item 2): `harness::nocall` on the stock image, which
//! must pass, and on the negative control (cargo feature `unikernel/nf-indirect-control`: a
//! type-erased NF run through `Core::poll_nf`), where it must report the indirect call in
//! `poll_nf`. Neither image is booted.

use gannet_tests::*;
use harness::nocall::{self, Offense, LOOP_FUNCTIONS};

#[test]
fn stock_image_has_no_indirect_call_in_its_loops() {
    let img = image();
    let report = nocall::check_image(&img, LOOP_FUNCTIONS)
        .unwrap_or_else(|e| panic!("nocall {}: {e:#}", img.display()));
    let text = report.text();
    eprint!("{text}");
    assert!(report.ok(), "{text}");
    assert!(report.missing.is_empty(), "{text}");
    for name in [
        "poll_l2",
        "poll_route",
        "forward_rest",
        "forward_run_general",
    ] {
        assert!(
            report.functions.iter().any(|f| f.short == name),
            "{name} not checked\n{text}"
        );
    }
    // forward_rest and forward_run_general dispatch through jump tables into themselves.
    for name in ["forward_rest", "forward_run_general"] {
        assert!(
            report
                .functions
                .iter()
                .filter(|f| f.short == name)
                .any(|f| !f.tables.is_empty()),
            "{name}: no jump table seen\n{text}"
        );
    }
    assert!(report
        .functions
        .iter()
        .all(|f| f.indirect_calls == 0 && f.instructions > 0));
}

#[test]
fn type_erased_nf_is_caught_in_poll_nf() {
    let given = std::env::var_os("GANNET_NF_CONTROL_IMAGE").is_some_and(|p| !p.is_empty());
    let img = qemu::default_nf_control_image();
    let img = if given || (img.is_file() && !qemu::image_stale(&qemu::workspace_root(), &img)) {
        img
    } else {
        qemu::build_nf_control_image().unwrap_or_else(|e| panic!("{e:#}"))
    };
    let report = nocall::check_image(&img, LOOP_FUNCTIONS)
        .unwrap_or_else(|e| panic!("nocall {}: {e:#}", img.display()));
    let text = report.text();
    assert!(!report.ok(), "the control passed:\n{text}");
    let in_poll_nf: Vec<_> = report
        .findings()
        .filter(|(f, x)| f.short == "poll_nf" && x.offense == Offense::IndirectCall)
        .collect();
    assert!(
        !in_poll_nf.is_empty(),
        "no indirect call in poll_nf:\n{text}"
    );
    for (f, x) in &in_poll_nf {
        assert!((f.start..f.end).contains(&x.at), "{text}");
        assert!(x.text.starts_with("call "), "{text}");
        assert!(
            text.contains(&format!("OFFENDING {:#x} in {}", x.at, f.name)),
            "{text}"
        );
    }
}
