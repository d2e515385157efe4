//! The linker script of every Gannet image, only for the bare-metal target: copied to this
//! crate's `OUT_DIR` as `gannet.ld` and put on the link path of everything that depends on
//! this crate (cortex-m-rt's `link.x` model), so an image in any crate links with
//! `-Tgannet.ld` (this crate's own binary here; a user's image from its build script, as
//! `template/build.rs` does). It links the kernel at 1 MiB.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::env::var("OUT_DIR").unwrap();
    println!("cargo::rerun-if-changed=linker.ld");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        std::fs::copy(format!("{dir}/linker.ld"), format!("{out}/gannet.ld"))
            .expect("copying linker.ld to OUT_DIR");
        println!("cargo::rustc-link-search={out}");
        println!("cargo::rustc-link-arg-bins=-Tgannet.ld");
    }
}
