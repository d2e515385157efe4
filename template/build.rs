//! Link the image with Gannet's linker script (`gannet.ld`, put on the link path by the
//! `unikernel` crate's build script): the kernel at 1 MiB, the PVH note, the boot sections.
//! Only for the image's target (`x86_64-unknown-none`): the host build that `cargo test-host`
//! makes links as any host program (and `unikernel` puts no script on its link path).
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo::rustc-link-arg-bins=-Tgannet.ld");
    }
}
