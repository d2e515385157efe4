//! What Gannet's plots share (the lab's peer plots, `mm`'s allocator and page_pool benches).
//!
//! plotters' `ab_glyph` text backend needs a font registered by hand (it reads no fontconfig);
//! [`register_font`] finds a common system TTF and registers it once as `sans-serif`.

use std::sync::OnceLock;

/// Where Debian, Arch and Fedora keep DejaVu Sans or Liberation Sans, first found wins.
const FONT_PATHS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Set to any value to draw plots without text (lines only), as on a machine without fonts.
pub const NO_FONT_ENV: &str = "GANNET_PLOT_NO_FONT";

/// Register a system TTF font as plotters' `sans-serif` (once per process; later calls return
/// the first call's answer). Returns `false` when none of the known paths holds a font that
/// loads, or when [`NO_FONT_ENV`] is set: callers then draw without labels.
pub fn register_font() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        if std::env::var_os(NO_FONT_ENV).is_some() {
            return false;
        }
        FONT_PATHS.iter().any(|p| {
            std::fs::read(p).is_ok_and(|bytes| {
                // plotters keeps the font for the life of the process: leak it once.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font(
                    "sans-serif",
                    plotters::style::FontStyle::Normal,
                    bytes,
                )
                .is_ok()
            })
        })
    })
}
