//! The build path of a guest: compile a policy crate for `wasm32-unknown-unknown` and
//! wrap the core module as a component. No WASI adapter: the component imports only
//! the policy world. [`c`] does the same for a policy written in C.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

pub mod c;

/// Wraps a core module built with `switchyard_guest_sdk::export_policy!` (it carries its WIT in a
/// custom section) as a component, without the `component-name` section the encoder
/// always writes: it names instances and functions for tools (its size in every guest:
/// docs/benchmarks-history.md, "A policy in C"), and neither wasmtime nor the host reads it.
pub fn componentize(core_module: &[u8]) -> Result<Vec<u8>> {
    let component = wit_component::ComponentEncoder::default()
        .module(core_module)
        .context("reading the core module's component-type section")?
        .validate(true)
        .encode()
        .context("encoding the component")?;
    without_custom_section(&component, "component-name")
}

/// `wasm` (a module or a component) without its top-level custom sections called `name`;
/// every other section byte for byte. Sections are walked by their size prefix only.
fn without_custom_section(wasm: &[u8], name: &str) -> Result<Vec<u8>> {
    use wasmparser::BinaryReader;
    const HEADER: usize = 8; // magic and version (layer)
    let mut out = wasm.get(..HEADER).context("shorter than a wasm header")?.to_vec();
    let mut reader = BinaryReader::new(&wasm[HEADER..], HEADER);
    while !reader.eof() {
        let start = reader.original_position();
        let id = reader.read_u8()?;
        let len = reader.read_var_u32()?;
        let body = reader.read_bytes(usize::try_from(len)?)?;
        if id == 0 && BinaryReader::new(body, 0).read_string()? == name {
            continue;
        }
        out.extend_from_slice(&wasm[start..reader.original_position()]);
    }
    Ok(out)
}

/// One guest to build: a package of the workspace and the name of its library target.
#[derive(Debug, Clone)]
pub struct GuestCrate {
    /// The package name (`cargo build -p`).
    pub package: String,
    /// Its library target's name: the core module is `<lib_name>.wasm`.
    pub lib_name: String,
}

impl GuestCrate {
    /// A package whose library name is the package name with `-` replaced by `_`.
    pub fn new(package: &str) -> Self {
        Self { package: package.to_string(), lib_name: package.replace('-', "_") }
    }
}

/// Where a build script builds guests: `guests/` inside the outer build's target
/// directory, so `CARGO_TARGET_DIR` (or `build.target-dir`) is honoured, yet apart from
/// the outer build's own profile directories (a nested cargo waits on their lock).
///
/// Found from `OUT_DIR` (`<target>/[<triple>/]<profile>/build/<pkg>/out`): the nearest
/// ancestor holding the `CACHEDIR.TAG` cargo writes into every target directory; failing
/// that, `<workspace>/target`.
pub fn guest_target_dir(workspace: &Path) -> PathBuf {
    target_dir_of(std::env::var_os("OUT_DIR").map(PathBuf::from).as_deref(), workspace).join("guests")
}

/// The target directory that holds `out_dir`, else `<workspace>/target`.
fn target_dir_of(out_dir: Option<&Path>, workspace: &Path) -> PathBuf {
    out_dir
        .and_then(|out| out.ancestors().find(|dir| dir.join("CACHEDIR.TAG").is_file()))
        .map_or_else(|| workspace.join("target"), Path::to_path_buf)
}

/// Builds guest crates of the workspace at `workspace` into `target_dir` (kept apart from
/// the host's target directory, so a build script does not wait on its own lock) with
/// the `guest` profile and `+simd128`, and returns each as a component.
///
/// Meant for build scripts: prints `cargo:rerun-if-changed` for nothing; the caller does.
pub fn build_guests(
    workspace: &Path,
    target_dir: &Path,
    guests: &[GuestCrate],
) -> Result<Vec<(GuestCrate, Vec<u8>)>> {
    // One cargo run per guest, its module read right after: cargo unifies features across
    // the packages of one run, and a policy built on another policy's library (e.g.
    // `request-limit` on `default`) must get it without that policy's `export` feature,
    // whose component exports would otherwise be linked twice.
    let out = target_dir.join("wasm32-unknown-unknown").join("guest");
    guests
        .iter()
        .map(|guest| {
            build_one(workspace, target_dir, guest)?;
            let path: PathBuf = out.join(format!("{}.wasm", guest.lib_name));
            let core = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let component =
                componentize(&core).with_context(|| format!("componentizing {}", guest.package))?;
            Ok((guest.clone(), component))
        })
        .collect()
}

/// Builds one guest crate for `wasm32-unknown-unknown` with the `guest` profile.
fn build_one(workspace: &Path, target_dir: &Path, guest: &GuestCrate) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .args(["--target", "wasm32-unknown-unknown", "--profile", "guest", "--locked"])
        .arg("--target-dir")
        .arg(target_dir);
    cmd.args(["-p", &guest.package]);
    // The outer build's flags and wrappers target the host; none of them may leak in.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_MANIFEST_DIR",
        "CARGO_PKG_NAME",
    ] {
        cmd.env_remove(var);
    }
    for (var, _) in std::env::vars_os() {
        let var = var.to_string_lossy();
        if var.starts_with("CARGO_PROFILE_")
            || var.starts_with("CARGO_CFG_")
            || var.starts_with("CARGO_FEATURE_")
        {
            cmd.env_remove(var.as_ref());
        }
    }
    // SIMD lets the per-candidate loops vectorise (BENCHMARKS.md, "Guest call overhead":
    // the slope). Vector width 4 over f64 columns makes LLVM load four u32 rows with one
    // `v128.load` (width 2 loads each pair with `v128.load64_zero`, which Cranelift lowers
    // through a general register), and interleave 2 spreads Cranelift's stack reloads
    // around the fuel check over 16 rows per iteration: the default policy's score over
    // 1,024 candidates is faster (`cargo bench --bench ratio`; width 8 or interleave 4:
    // slower).
    cmd.env(
        "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
        "-Ctarget-feature=+simd128 -Cllvm-args=-force-vector-width=4 -Cllvm-args=-force-vector-interleave=2",
    );
    let status = cmd.status().context("running cargo to build the guests")?;
    if !status.success() {
        bail!("building the guest {} failed: {status}", guest.package);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guests_go_to_the_target_dir_that_holds_out_dir_wherever_it_is() {
        let elsewhere = std::env::temp_dir().join(format!("switchyard-target-{}", std::process::id()));
        let out = elsewhere.join("wasm32-unknown-unknown/debug/build/pkg-0123/out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(elsewhere.join("CACHEDIR.TAG"), "Signature: 8a477f597d28d172789f06886806bc55")
            .unwrap();
        let workspace = Path::new("/nonexistent/workspace");
        assert_eq!(target_dir_of(Some(&out), workspace), elsewhere, "CARGO_TARGET_DIR honoured");
        assert_eq!(target_dir_of(None, workspace), workspace.join("target"), "no OUT_DIR: the default");
        let untagged = std::env::temp_dir().join(format!("switchyard-untagged-{}", std::process::id()));
        std::fs::create_dir_all(&untagged).unwrap();
        assert_eq!(target_dir_of(Some(&untagged), workspace), workspace.join("target"));
        let _ = std::fs::remove_dir_all(elsewhere);
        let _ = std::fs::remove_dir_all(untagged);
    }

    #[test]
    fn only_the_named_top_level_custom_section_goes() {
        use wasm_encoder::{Component, CustomSection, Module, ModuleSection};
        let custom =
            |name: &'static str| CustomSection { name: name.into(), data: b"data".as_slice().into() };
        let mut inner = Module::new();
        inner.section(&custom("component-name")); // nested: not top-level, stays
        let mut component = Component::new();
        component.section(&custom("component-name"));
        component.section(&ModuleSection(&inner));
        component.section(&custom("producers"));
        component.section(&custom("component-name"));
        let bytes = component.finish();
        let out = without_custom_section(&bytes, "component-name").unwrap();
        let mut expected = Component::new();
        expected.section(&ModuleSection(&inner));
        expected.section(&custom("producers"));
        assert_eq!(out, expected.finish());
        assert!(wasmparser::Validator::new().validate_all(&out).is_ok());
        assert!(without_custom_section(&bytes[..bytes.len() - 1], "x").is_err(), "a cut section is an error");
    }
}
