//! Builds the benchmark guests (noop, imports, and the hostile guests of `--bench sandbox`
//! and `--bench hostile`) from source as components into OUT_DIR.

use std::path::PathBuf;

use switchyard_guest_sdk::build::{GuestCrate, build_guests};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest.parent().expect("benches/ is inside the workspace").to_path_buf();
    for dir in ["wit", "guest-sdk", "policies"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    let guests: Vec<GuestCrate> = [
        "switchyard-noop",
        "switchyard-imports",
        "adversarial-panic",
        "adversarial-iloop",
        "adversarial-import-loop",
        "adversarial-commit-spin",
        "adversarial-commit-leak",
        "adversarial-huge-error",
        "adversarial-huge-result",
        "adversarial-nan-once",
    ]
    .iter()
    .map(|p| GuestCrate::new(p))
    .collect();
    let built = build_guests(&workspace, &workspace.join("target").join("guests"), &guests)
        .unwrap_or_else(|e| panic!("building bench guests: {e:#}"));
    for (guest, component) in built {
        std::fs::write(out_dir.join(format!("{}.component.wasm", guest.lib_name)), component).expect("write");
    }
}
