//! Gannet's stock image: the machine part (`unikernel::kernel`) running the stock network
//! functions, `mode=` choosing one (`unikernel::appliance::Stock`). A user's image is the same
//! one line over their own NF (the template, `template/`).
//!
//! `x86_64-unknown-none` only; on the host this binary is a stub that says so.
#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "gannet is the kernel image for x86_64-unknown-none: build it with `cargo xtask build`"
    );
    std::process::exit(2);
}

#[cfg(all(target_os = "none", not(feature = "nf-indirect-control")))]
unikernel::main!(unikernel::appliance::Stock);

// The no-indirect-call check's negative control (never booted): a type-erased NF.
#[cfg(all(target_os = "none", feature = "nf-indirect-control"))]
unikernel::main!(unikernel::nf_control::Control);
