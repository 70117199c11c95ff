//! What the workspace's tests and benches share. The guests they load: real components
//! built from source by `build.rs` (Rust guests from `policies/testing` and
//! `policies/adversarial`, wrapped like any tenant's policy; WAT guests for shapes Rust
//! cannot produce; C guests by clang). The requests hostile guests meet ([`requests`]);
//! engines and random tables ([`fixtures`]); a real nats-server ([`nats`]); a real
//! `switchyard serve` and its client ([`server`]); a fleet of them ([`fleet`]).
//!
//! A dev-dependency only, so `cargo build --bin switchyard` compiles none of it.

#![forbid(unsafe_code)]

pub mod fixtures;
pub mod fleet;
pub mod nats;
pub mod requests;
pub mod server;

/// The target directory's scratch space (`<target>/tmp`, what cargo names
/// `CARGO_TARGET_TMPDIR` to integration tests and benches), found from the running test
/// or bench binary, `<target>/<profile>/deps/<name>-<hash>`: where a fleet's nats-server
/// is installed once and shared.
pub fn target_tmp_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let target = exe.ancestors().nth(3).expect("a test binary lives in <target>/<profile>/deps");
    target.join("tmp")
}

macro_rules! out_dir_file {
    ($file:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $file))
    };
}

/// The default policy's guest build (also a builtin; built here too so tests load the
/// same bytes through the path a tenant's upload takes).
pub const DEFAULT_POLICY: &[u8] = out_dir_file!("switchyard_policy_default.component.wasm");
/// The default policy written in C (policies/default-c), built by clang against the C
/// SDK: the same costs as [`DEFAULT_POLICY`], bit for bit.
pub const DEFAULT_POLICY_C: &[u8] = out_dir_file!("switchyard_policy_default_c.component.wasm");
/// Reads every lazy fact through the C SDK and folds them into its costs (C).
pub const C_FACTS: &[u8] = out_dir_file!("switchyard_c_facts.component.wasm");
/// Echoes what the host passed it, so tests can check the contract (policies/testing/probe).
pub const PROBE: &[u8] = out_dir_file!("switchyard_probe.component.wasm");
/// Declares no inputs and returns zero costs: the sandbox's fixed cost per call.
pub const NOOP: &[u8] = out_dir_file!("switchyard_noop.component.wasm");
/// Calls the three host imports: what they cost.
pub const IMPORTS: &[u8] = out_dir_file!("switchyard_imports.component.wasm");

/// Hostile guests (policies/adversarial): each attacks one bound of the sandbox.
pub mod hostile {
    /// Loops forever in `score`.
    pub const ILOOP: &[u8] = out_dir_file!("adversarial_iloop.component.wasm");
    /// Recurses without end.
    pub const RECURSION: &[u8] = out_dir_file!("adversarial_recursion.component.wasm");
    /// Grows memory past any limit.
    pub const MEMORY_BOMB: &[u8] = out_dir_file!("adversarial_memory_bomb.component.wasm");
    /// Carries a data segment larger than any limit.
    pub const HUGE_DATA: &[u8] = out_dir_file!("adversarial_huge_data.component.wasm");
    /// Spins in `configure`.
    pub const CONFIGURE_SPIN: &[u8] = out_dir_file!("adversarial_configure_spin.component.wasm");
    /// Panics on request (a trap).
    pub const PANIC: &[u8] = out_dir_file!("adversarial_panic.component.wasm");
    /// Returns one cost too few.
    pub const WRONG_LENGTH: &[u8] = out_dir_file!("adversarial_wrong_length.component.wasm");
    /// Returns NaN and infinite costs.
    pub const BAD_COSTS: &[u8] = out_dir_file!("adversarial_bad_costs.component.wasm");
    /// Keeps a secret in its memory and scans that memory for another instance's.
    pub const SECRET: &[u8] = out_dir_file!("adversarial_secret.component.wasm");
    /// Spins in its start function (WAT).
    pub const START_SPIN: &[u8] = out_dir_file!("adversarial_start_spin.component.wasm");
    /// Grows a table past its limit (WAT).
    pub const TABLE_GROWTH: &[u8] = out_dir_file!("adversarial_table_growth.component.wasm");
    /// Imports a WASI interface the policy world does not offer (WAT).
    pub const WASI_IMPORT: &[u8] = out_dir_file!("adversarial_wasi_import.component.wasm");
    /// Targets another world (WAT).
    pub const OTHER_WORLD: &[u8] = out_dir_file!("adversarial_other_world.component.wasm");
    /// Calls host imports in a loop.
    pub const IMPORT_LOOP: &[u8] = out_dir_file!("adversarial_import_loop.component.wasm");
    /// Spins in `on-selected`.
    pub const COMMIT_SPIN: &[u8] = out_dir_file!("adversarial_commit_spin.component.wasm");
    /// Grows its state on every commit.
    pub const COMMIT_LEAK: &[u8] = out_dir_file!("adversarial_commit_leak.component.wasm");
    /// Returns an enormous error message.
    pub const HUGE_ERROR: &[u8] = out_dir_file!("adversarial_huge_error.component.wasm");
    /// Returns an enormous cost list.
    pub const HUGE_RESULT: &[u8] = out_dir_file!("adversarial_huge_result.component.wasm");
    /// Returns NaN once, then behaves.
    pub const NAN_ONCE: &[u8] = out_dir_file!("adversarial_nan_once.component.wasm");
    /// Fills memory with `memory.fill` (WAT): bulk memory is fuel-charged per byte.
    pub const MEMORY_FILL: &[u8] = out_dir_file!("adversarial_memory_fill.component.wasm");
    /// Writes costs past the end of its array until it leaves its memory (C).
    pub const C_OVERRUN: &[u8] = out_dir_file!("adversarial_c_overrun.component.wasm");
    /// The iloop guest's core module, not wrapped as a component.
    pub const CORE_MODULE: &[u8] = out_dir_file!("adversarial_core_module.wasm");
}

/// `bytes` with a custom section appended carrying `tag`: the same policy, other bytes
/// (another sha256, so another version to upload or another component to compile, cache
/// and load). Custom sections are allowed anywhere in a component.
pub fn variant(bytes: &[u8], tag: u32) -> Vec<u8> {
    let name = b"switchyard-test";
    let payload = tag.to_le_bytes();
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(&payload);
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push(section.len() as u8); // < 128: one LEB128 byte
    out.extend_from_slice(&section);
    out
}
