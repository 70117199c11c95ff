//! Builds the guests the integration tests and benchmarks load (from real source, as
//! components) into OUT_DIR; `src/lib.rs` includes them with `include_bytes!`.
//!
//! - Rust guests (`GUESTS`): compiled for wasm32-unknown-unknown and wrapped by the guest
//!   SDK's build step, like any tenant's policy.
//! - WAT guests (`WAT_GUESTS`): hostile shapes Rust cannot produce (a start function, table
//!   growth, a WASI import, another world), assembled with `wat` and wrapped with
//!   wit-component against a real WIT world.
//! - C guests (`C_GUESTS`): compiled by clang against the C SDK (guest-sdk/c) and wrapped
//!   by the same step (`switchyard_guest_build::c`), with the toolchain
//!   `switchyard_guest_build::c::toolchain` resolves (clang-19 or clang on the PATH, else
//!   zig's clang installed from PyPI into the target directory).
//! - `adversarial_core_module.wasm`: the iloop guest's core module, not wrapped.

use std::path::{Path, PathBuf};

use switchyard_guest_build::c::build_c_guest;
use switchyard_guest_build::{GuestCrate, build_guests, guest_target_dir};
use wit_component::StringEncoding;
use wit_parser::Resolve;

/// Test guests: policy packages of this workspace.
const GUESTS: &[&str] = &[
    "switchyard-policy-default",
    "switchyard-probe",
    "switchyard-noop",
    "switchyard-imports",
    "adversarial-iloop",
    "adversarial-recursion",
    "adversarial-memory-bomb",
    "adversarial-huge-data",
    "adversarial-configure-spin",
    "adversarial-panic",
    "adversarial-wrong-length",
    "adversarial-bad-costs",
    "adversarial-secret",
    "adversarial-import-loop",
    "adversarial-commit-spin",
    "adversarial-commit-leak",
    "adversarial-huge-error",
    "adversarial-huge-result",
    "adversarial-nan-once",
];

/// WAT guests: (name under policies/adversarial, world, extra WIT files pushed first).
const WAT_GUESTS: &[(&str, &str, &[&str])] = &[
    ("start-spin", "switchyard:policy/selection-policy@0.2.0", &[]),
    ("table-growth", "switchyard:policy/selection-policy@0.2.0", &[]),
    ("memory-fill", "switchyard:policy/selection-policy@0.2.0", &[]),
    ("wasi-import", "tenant:wasi-import/policy-with-environment", &["wit/environment.wit", "world.wit"]),
    ("other-world", "tenant:other-world/other", &["world.wit"]),
];

/// C guests: (output name, sources under policies/).
const C_GUESTS: &[(&str, &[&str])] = &[
    ("switchyard_policy_default_c", &["default-c/default.c"]),
    ("adversarial_c_overrun", &["adversarial/c-overrun/overrun.c"]),
    ("switchyard_c_facts", &["testing/c-facts/facts.c"]),
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace =
        manifest_dir.ancestors().nth(2).expect("crates/test-util/ is inside the workspace").to_path_buf();
    for dir in ["wit", "guest-sdk", "policies"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-changed=build.rs");
    // The C guests' compiler (`switchyard_guest_build::c::toolchain`): another clang, other code.
    println!("cargo:rerun-if-env-changed=SWITCHYARD_CLANG");
    println!("cargo:rerun-if-env-changed=SWITCHYARD_WASM_LD");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    let target_dir = guest_target_dir(&workspace);
    let guests: Vec<GuestCrate> = GUESTS.iter().map(|p| GuestCrate::new(p)).collect();
    let built = build_guests(&workspace, &target_dir, &guests)
        .unwrap_or_else(|e| panic!("building test guests: {e:#}"));
    for (guest, component) in built {
        write(&out_dir.join(format!("{}.component.wasm", guest.lib_name)), &component);
    }
    let core = target_dir.join("wasm32-unknown-unknown/guest/adversarial_iloop.wasm");
    let core = std::fs::read(&core).unwrap_or_else(|e| panic!("reading {}: {e}", core.display()));
    write(&out_dir.join("adversarial_core_module.wasm"), &core);

    for (name, sources) in C_GUESTS {
        let sources: Vec<PathBuf> = sources.iter().map(|s| workspace.join("policies").join(s)).collect();
        let component = build_c_guest(&target_dir.join("c"), name, &sources)
            .unwrap_or_else(|e| panic!("building the C guest {name}: {e:#}"));
        write(&out_dir.join(format!("{name}.component.wasm")), &component);
    }

    for (name, world, wit_files) in WAT_GUESTS {
        let dir = workspace.join("policies/adversarial").join(name);
        let component = wat_guest(&workspace, &dir, name, world, wit_files)
            .unwrap_or_else(|e| panic!("building the WAT guest {name}: {e:#}"));
        write(&out_dir.join(format!("adversarial_{}.component.wasm", name.replace('-', "_"))), &component);
    }
}

/// Assembles `<dir>/<name>.wat`, embeds `world` (from wit/ plus `wit_files`) and wraps it.
fn wat_guest(
    workspace: &Path,
    dir: &Path,
    name: &str,
    world: &str,
    wit_files: &[&str],
) -> anyhow::Result<Vec<u8>> {
    let mut module = wat::parse_file(dir.join(format!("{name}.wat")))?;
    let mut resolve = Resolve::default();
    let (policy_package, _) = resolve.push_dir(workspace.join("wit"))?;
    let mut main = policy_package;
    for file in wit_files.iter() {
        main = resolve.push_file(dir.join(file))?;
    }
    let world = resolve.select_world(&[main], Some(world))?;
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)?;
    wit_component::ComponentEncoder::default().module(&module)?.validate(true).encode()
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
