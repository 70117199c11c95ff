//! Builds the builtin policies as components (wasm32-unknown-unknown, wrapped in-process),
//! so the binary embeds the guest build of every builtin next to its native build.

use std::path::PathBuf;

use switchyard_guest_build::{GuestCrate, build_guests, guest_target_dir};

/// Builtin policy packages; `src/lib.rs` names each by its short name.
const BUILTINS: &[&str] = &[
    "switchyard-policy-default",
    "switchyard-policy-chwbl",
    "switchyard-policy-two-choice",
    "switchyard-policy-lmetric",
    "switchyard-policy-llmd-precise",
    "switchyard-policy-capacity-aware",
    "switchyard-policy-class-aware",
    "switchyard-policy-request-limit",
    "switchyard-policy-sglang-cache-aware",
];

fn main() -> anyhow::Result<()> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let workspace =
        manifest_dir.ancestors().nth(2).expect("crates/builtins/ is inside the workspace").to_path_buf();
    for dir in ["wit", "guest-sdk", "policies"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-changed=build.rs");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let target_dir = guest_target_dir(&workspace);
    let guests: Vec<GuestCrate> = BUILTINS.iter().map(|p| GuestCrate::new(p)).collect();
    for (guest, component) in build_guests(&workspace, &target_dir, &guests)? {
        std::fs::write(out_dir.join(format!("{}.component.wasm", guest.lib_name)), component)?;
    }
    Ok(())
}
