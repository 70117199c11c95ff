//! Builds the guests the integration tests load (from real source, as components) into
//! OUT_DIR; tests include them with `include_bytes!`.

use std::path::PathBuf;

use switchyard_guest_sdk::build::{GuestCrate, build_guests};

/// Test guests: policy packages of this workspace.
const GUESTS: &[&str] = &["switchyard-policy-default", "switchyard-probe"];

fn main() {
    let workspace = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    for dir in ["wit", "guest-sdk", "policies"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-changed=build.rs");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    let guests: Vec<GuestCrate> = GUESTS.iter().map(|p| GuestCrate::new(p)).collect();
    let built = build_guests(&workspace, &workspace.join("target").join("guests"), &guests)
        .unwrap_or_else(|e| panic!("building test guests: {e:#}"));
    for (guest, component) in built {
        let path = out_dir.join(format!("{}.component.wasm", guest.lib_name));
        std::fs::write(&path, component).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}
