//! Link the kernel at 1 MiB with our linker script, only for the bare-metal target.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    println!("cargo::rerun-if-changed=linker.ld");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo::rustc-link-arg-bins=-T{dir}/linker.ld");
    }
}
