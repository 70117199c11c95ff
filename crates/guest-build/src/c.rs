//! The C SDK (`guest-sdk/c/`) and the build of a policy written in C: bindings generated
//! from `wit/policy.wit` by wit-bindgen's C generator, the SDK's hand-written files,
//! clang for wasm32 (SIMD, no libc, no WASI) linked by wasm-ld, and the same wrap step as
//! a Rust guest ([`super::componentize`]).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail};
use wit_bindgen_core::Files;
use wit_bindgen_core::wit_parser::Resolve;

/// The contract the bindings are generated from (the same file the Rust SDK binds).
const WIT: &str = include_str!("../../../wit/policy.wit");

/// The SDK's hand-written files, by the name they are written under.
const HAND_WRITTEN: &[(&str, &str)] = &[
    ("switchyard.h", include_str!("../../../guest-sdk/c/switchyard.h")),
    ("switchyard.c", include_str!("../../../guest-sdk/c/switchyard.c")),
    ("switchyard_alloc.c", include_str!("../../../guest-sdk/c/switchyard_alloc.c")),
    ("switchyard_params.c", include_str!("../../../guest-sdk/c/switchyard_params.c")),
    ("switchyard_internal.h", include_str!("../../../guest-sdk/c/switchyard_internal.h")),
    ("include/stdlib.h", include_str!("../../../guest-sdk/c/include/stdlib.h")),
    ("include/string.h", include_str!("../../../guest-sdk/c/include/string.h")),
];

/// The SDK's C sources (the generated bindings' among them), compiled for size: none of
/// them runs per candidate.
const SDK_SOURCES: &[&str] =
    &["switchyard.c", "switchyard_alloc.c", "switchyard_params.c", "selection_policy.c"];

/// The object the generator writes with the world's type in a custom section: linked
/// in, it is what the wrap step reads the world from.
pub const COMPONENT_TYPE_OBJECT: &str = "selection_policy_component_type.o";

/// Flags of every compile: wasm32 with SIMD and bulk memory (`memcpy` is one
/// instruction), no libc headers but the SDK's (`include/`), no contraction of
/// `a * b + c` into a fused multiply-add, so the floats are Rust's to the bit, and code
/// optimised at the link, across files (`-flto`: the SDK's glue and the generated
/// bindings merge, ~600 bytes less of the default policy; each function keeps the
/// optimisation level of its file).
pub const COMPILE_FLAGS: &[&str] = &[
    "--target=wasm32-unknown-unknown",
    "-flto",
    "-msimd128",
    "-mbulk-memory",
    "-ffreestanding",
    "-nostdlibinc",
    "-ffp-contract=off",
    "-Wall",
    "-Wextra",
];

/// The policy's own sources: fast (they run per candidate).
pub const POLICY_OPT: &str = "-O3";
/// The SDK's: small.
pub const SDK_OPT: &str = "-Oz";

/// Flags of the link: optimised across files (see [`COMPILE_FLAGS`]), no libc, no start
/// function (the host calls the exports), no debug or name sections (the world's custom
/// section stays), and call and address operands written in their shortest form (wasm-ld
/// pads them to 5 bytes otherwise, a sizeable share of the default policy's module).
pub const LINK_FLAGS: &[&str] = &[
    "--target=wasm32-unknown-unknown",
    "-flto",
    "-nostdlib",
    "-Wl,--no-entry",
    "-Wl,--strip-all",
    "-Wl,--compress-relocations",
];

/// Every file of the C SDK: the bindings wit-bindgen's C generator makes from
/// `wit/policy.wit` (`selection_policy.h`, `.c` and the component-type object), and the
/// hand-written header, glue, allocator and parameter reader. Paths are relative
/// (`include/` holds the two libc headers the bindings include).
pub fn sdk_files() -> Result<Vec<(String, Vec<u8>)>> {
    let mut resolve = Resolve::default();
    let package = resolve.push_str("policy.wit", WIT).context("parsing wit/policy.wit")?;
    let world = resolve.select_world(&[package], Some("selection-policy"))?;
    let mut files = Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&resolve, world, &mut files)
        .context("generating the C bindings")?;
    let mut all: Vec<(String, Vec<u8>)> =
        files.iter().map(|(name, bytes)| (name.to_string(), bytes.to_vec())).collect();
    all.extend(HAND_WRITTEN.iter().map(|(name, text)| (name.to_string(), text.as_bytes().to_vec())));
    Ok(all)
}

/// Writes [`sdk_files`] into `dir` (created if missing); returns the paths written.
pub fn write_sdk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (name, bytes) in sdk_files()? {
        let path = dir.join(&name);
        let parent = path.parent().expect("a file in dir");
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The clang preferred when `$SWITCHYARD_CLANG` names none: LLVM 19's wasm backend writes
/// the vector loops as the Rust guests' (LLVM 20) are written. LLVM 14's (Debian 12's
/// `clang`) fills a shuffle's unused lanes with byte 0, which Cranelift cannot lower as
/// one `pshufd`, and a `max(0, x)` select as `v128.bitselect`: the C default policy's
/// selection is then slower than the Rust guest's, and as fast built by clang 19
/// (docs/benchmarks-history.md, "A policy in C", "clang 19 instead of clang 14").
pub const PREFERRED_CLANG: &str = "clang-19";

/// The wasm-ld of [`PREFERRED_CLANG`]'s LLVM.
pub const PREFERRED_WASM_LD: &str = "wasm-ld-19";

/// The PyPI release of zig installed when no clang is on the PATH: zig 0.14 bundles
/// LLVM 19's clang and lld (`zig clang`, `zig wasm-ld`), [`PREFERRED_CLANG`]'s line.
pub const ZIGLANG: &str = "ziglang==0.14.1";

/// How to get a compiler without the PyPI install, said by every error of [`toolchain`].
const FIX: &str = "install clang and lld (Debian/Ubuntu: `apt-get install clang-19 lld-19`), or set \
                   SWITCHYARD_CLANG=/path/to/clang and SWITCHYARD_WASM_LD=/path/to/wasm-ld";

/// A clang that targets wasm32 and the wasm-ld it links with.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// The clang program and the arguments it needs before any of ours.
    clang: Vec<OsString>,
    /// The wasm-ld executable, passed to the link as `-fuse-ld=<it>`.
    wasm_ld: PathBuf,
    /// Where it came from, for messages.
    origin: String,
}

impl Toolchain {
    /// A clang command (`zig clang -resource-dir …` for the PyPI install), to which the
    /// caller adds its flags.
    pub fn clang(&self) -> Command {
        let mut cmd = Command::new(&self.clang[0]);
        cmd.args(&self.clang[1..]);
        cmd
    }

    /// The flag that makes a link by [`Toolchain::clang`] use this toolchain's wasm-ld
    /// (`-fuse-ld=<absolute path>`; clang's wasm32 driver ignores `--ld-path`).
    pub fn link_arg(&self) -> OsString {
        let mut arg = OsString::from("-fuse-ld=");
        arg.push(&self.wasm_ld);
        arg
    }

    /// The wasm-ld executable.
    pub fn wasm_ld(&self) -> &Path {
        &self.wasm_ld
    }

    /// Where it came from: `SWITCHYARD_CLANG`, the PATH, or the PyPI install.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

/// The toolchain C guests are built with, resolved once per process:
///
/// 1. `$SWITCHYARD_CLANG` (and `$SWITCHYARD_WASM_LD`, else the wasm-ld that clang finds);
/// 2. else [`PREFERRED_CLANG`] and [`PREFERRED_WASM_LD`] on the PATH;
/// 3. else `clang` and `wasm-ld` on the PATH;
/// 4. else [`ZIGLANG`] from PyPI, installed once with `python3 -m pip install --target`
///    into `tools/` of the target directory (found from `OUT_DIR` in a build script, else
///    from the running executable), and used as `zig clang` and `zig wasm-ld`.
///
/// An error says what failed and how to do without the install.
pub fn toolchain() -> Result<Toolchain> {
    static RESOLVED: OnceLock<Result<Toolchain, String>> = OnceLock::new();
    RESOLVED
        .get_or_init(|| resolve(&|var| std::env::var_os(var), &tools_dir()).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// [`toolchain`] with the environment read through `var` and the PyPI install in `tools`.
fn resolve(var: &dyn Fn(&str) -> Option<OsString>, tools: &Path) -> Result<Toolchain> {
    let path = var("PATH").unwrap_or_default();
    if let Some(clang) = var("SWITCHYARD_CLANG") {
        let clang = PathBuf::from(clang);
        let origin = format!("SWITCHYARD_CLANG={}", clang.display());
        let wasm_ld = match var("SWITCHYARD_WASM_LD") {
            Some(ld) => PathBuf::from(ld),
            None => {
                runs(&mut Command::new(&clang)).with_context(|| format!("{origin} did not run: {FIX}"))?;
                // clang finds wasm-ld beside itself or on the PATH; ask it which.
                let out = Command::new(&clang)
                    .args(["--target=wasm32-unknown-unknown", "-print-prog-name=wasm-ld"])
                    .output()
                    .with_context(|| format!("running {}", clang.display()))?;
                PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            }
        };
        return checked(vec![clang.into_os_string()], &path, wasm_ld, origin);
    }
    for (clang, ld) in [(PREFERRED_CLANG, PREFERRED_WASM_LD), ("clang", "wasm-ld")] {
        if let (Some(clang), Some(ld)) = (on_path(&path, clang), on_path(&path, ld)) {
            let origin = format!("{} and {} on the PATH", clang.display(), ld.display());
            return checked(vec![clang.into_os_string()], &path, ld, origin);
        }
    }
    let dir = install_zig(&path, tools)?;
    let zig = dir.join("ziglang/zig");
    let clang = vec![
        zig.clone().into_os_string(),
        "clang".into(),
        // zig's clang looks for its own headers (stdint.h, …) where zig does not keep them.
        "-resource-dir".into(),
        dir.join("ziglang/lib").into_os_string(),
    ];
    checked(clang, &path, dir.join("bin/wasm-ld"), format!("{ZIGLANG} from PyPI in {}", dir.display()))
}

/// The toolchain once both of its programs answered `--version`; the PATH resolves a
/// bare wasm-ld to a path (for `-fuse-ld=`).
fn checked(clang: Vec<OsString>, path: &OsStr, wasm_ld: PathBuf, origin: String) -> Result<Toolchain> {
    let mut cmd = Command::new(&clang[0]);
    cmd.args(&clang[1..]);
    runs(&mut cmd).with_context(|| format!("C guests need clang, and {origin} did not run: {FIX}"))?;
    let wasm_ld = if wasm_ld.components().count() == 1 { on_path(path, &wasm_ld) } else { Some(wasm_ld) }
        .filter(|ld| runs(&mut Command::new(ld)).is_ok())
        .with_context(|| {
            format!("C guests are linked by wasm-ld (from lld), and {origin} has none that runs: {FIX}")
        })?;
    let wasm_ld = std::path::absolute(&wasm_ld).unwrap_or(wasm_ld);
    Ok(Toolchain { clang, wasm_ld, origin })
}

/// `cmd --version`, an error unless it ran and succeeded.
fn runs(cmd: &mut Command) -> Result<()> {
    let out = cmd.arg("--version").output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({})", out.status);
    }
    Ok(())
}

/// The first executable file called `name` in the directories of `path`.
fn on_path(path: &OsStr, name: impl AsRef<Path>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|dir| dir.join(name.as_ref()))
        .find(|file| file.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Where [`ZIGLANG`] is installed: `tools/` of the target directory that holds `OUT_DIR`
/// (a build script) or the running executable (a test, the CLI under `target/`), found by
/// the `CACHEDIR.TAG` cargo writes into every target directory; else `$CARGO_TARGET_DIR`,
/// else the temp dir.
fn tools_dir() -> PathBuf {
    let from = |path: Option<PathBuf>| {
        path?.ancestors().find(|dir| dir.join("CACHEDIR.TAG").is_file()).map(Path::to_path_buf)
    };
    from(std::env::var_os("OUT_DIR").map(PathBuf::from))
        .or_else(|| from(std::env::current_exe().ok()))
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| std::env::temp_dir().join("switchyard"))
        .join("tools")
}

/// [`ZIGLANG`] installed into `tools/ziglang-<version>` (once: a fresh directory, renamed
/// into place when complete, so concurrent builds do not collide), with `bin/wasm-ld`
/// running `zig wasm-ld`. Returns the directory.
fn install_zig(path: &OsStr, tools: &Path) -> Result<PathBuf> {
    let dir = tools.join(ZIGLANG.replace("==", "-"));
    if dir.join("ziglang/zig").is_file() && dir.join("bin/wasm-ld").is_file() {
        return Ok(dir);
    }
    let none = "found no clang-19 with wasm-ld-19 nor clang with wasm-ld on the PATH, and \
                SWITCHYARD_CLANG is not set";
    let python = on_path(path, "python3").with_context(|| {
        format!("{none}; installing {ZIGLANG} from PyPI needs python3, not on the PATH: {FIX}")
    })?;
    if !Command::new(&python).args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success()) {
        bail!(
            "{none}; installing {ZIGLANG} from PyPI needs pip, and `{} -m pip` did not run \
             (Debian/Ubuntu: `apt-get install python3-pip`), or {FIX}",
            python.display()
        );
    }
    std::fs::create_dir_all(tools).with_context(|| format!("creating {}", tools.display()))?;
    let partial = tools.join(format!("{}.partial-{}", ZIGLANG.replace("==", "-"), std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    let pip = |extra: &[&str]| {
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--target"])
            .arg(&partial)
            .args(extra)
            .arg(ZIGLANG)
            .output()
    };
    let mut out = pip(&[]).with_context(|| format!("running {} -m pip", python.display()))?;
    if !out.status.success() {
        // Distributions that mark their Python externally managed (PEP 668).
        out = pip(&["--break-system-packages"])
            .with_context(|| format!("running {} -m pip", python.display()))?;
    }
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&partial);
        bail!(
            "{none}; installing {ZIGLANG} from PyPI with `{} -m pip install --target` failed (no \
             network to PyPI?): {FIX}\n{}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let shim = partial.join("bin/wasm-ld");
    std::fs::create_dir_all(partial.join("bin")).context("creating the wasm-ld shim's directory")?;
    std::fs::write(&shim, "#!/bin/sh\nexec \"$(dirname \"$0\")/../ziglang/zig\" wasm-ld \"$@\"\n")
        .with_context(|| format!("writing {}", shim.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", shim.display()))?;
    }
    // Another build may have renamed its own copy into place first: then use that one.
    if std::fs::rename(&partial, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    if !dir.join("ziglang/zig").is_file() {
        bail!("{} is missing after installing {ZIGLANG}: {FIX}", dir.join("ziglang/zig").display());
    }
    Ok(dir)
}

/// Builds a policy written in C: its `sources` (`-O3`) and the SDK (`-Oz`, bindings
/// generated into `work_dir`), linked into `work_dir/<name>.core.wasm`, then wrapped as a
/// component by the same step as a Rust guest, with [`toolchain`]. Returns the component.
pub fn build_c_guest(work_dir: &Path, name: &str, sources: &[PathBuf]) -> Result<Vec<u8>> {
    let toolchain = toolchain()?;
    let sdk = work_dir.join("sdk");
    write_sdk(&sdk)?;
    let objects = work_dir.join(format!("{name}.o"));
    std::fs::create_dir_all(&objects).with_context(|| format!("creating {}", objects.display()))?;
    let mut linked = Vec::new();
    let units = SDK_SOURCES
        .iter()
        .map(|s| (sdk.join(s), SDK_OPT))
        .chain(sources.iter().map(|s| (s.clone(), POLICY_OPT)));
    for (i, (source, opt)) in units.enumerate() {
        let stem = source.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let object = objects.join(format!("{i}-{stem}.o"));
        run(toolchain
            .clang()
            .args(COMPILE_FLAGS)
            .arg(opt)
            .arg("-isystem")
            .arg(sdk.join("include"))
            .arg("-I")
            .arg(&sdk)
            .arg("-c")
            .arg(&source)
            .arg("-o")
            .arg(&object))
        .with_context(|| format!("compiling {}", source.display()))?;
        linked.push(object);
    }
    linked.push(sdk.join(COMPONENT_TYPE_OBJECT));
    let core = work_dir.join(format!("{name}.core.wasm"));
    run(toolchain.clang().args(LINK_FLAGS).arg(toolchain.link_arg()).args(&linked).arg("-o").arg(&core))
        .with_context(|| format!("linking {}", core.display()))?;
    let module = std::fs::read(&core).with_context(|| format!("reading {}", core.display()))?;
    refuse_exports(&module, NOT_EXPORTED).with_context(|| format!("checking {}", core.display()))?;
    super::componentize(&module).with_context(|| format!("componentizing {name}"))
}

/// The post-returns the bindings generate for `score` and `filter`, which would free each
/// answer after the call. The SDK answers from one buffer it reuses instead and replaces
/// them with definitions that are not exported (`switchyard.c`): if the generated names
/// ever change, the bindings' own would be exported again and free that buffer after
/// every call, so the build refuses a module that exports either.
const NOT_EXPORTED: &[&str] =
    &["cabi_post_switchyard:policy/policy@0.2.0#score", "cabi_post_switchyard:policy/policy@0.2.0#filter"];

/// An error if `module` exports any of `names`.
fn refuse_exports(module: &[u8], names: &[&str]) -> Result<()> {
    use wasmparser::{Parser, Payload};
    for payload in Parser::new(0).parse_all(module) {
        if let Payload::ExportSection(reader) = payload? {
            for export in reader {
                let export = export?;
                if names.contains(&export.name) {
                    bail!(
                        "exports `{}`, which would free the SDK's reused answer after each call: \
                           did the bindings' names change?",
                        export.name
                    );
                }
            }
        }
    }
    Ok(())
}

/// Runs `cmd`; its stderr (clang's diagnostics) is the error when it fails.
fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_has_the_generated_bindings_and_the_hand_written_files() {
        let files = sdk_files().unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        for name in ["selection_policy.h", "selection_policy.c", COMPONENT_TYPE_OBJECT, "switchyard.h"] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        let header = &files.iter().find(|(n, _)| n == "selection_policy.h").unwrap().1;
        let header = String::from_utf8_lossy(header);
        assert!(header.contains("exports_switchyard_policy_policy_score"), "generated from the WIT");
        for source in SDK_SOURCES {
            assert!(names.contains(source), "{source} is written");
        }
    }

    #[test]
    fn a_missing_clang_is_an_error_that_says_what_to_install() {
        let tools = Path::new("/nonexistent/tools");
        let named = |var: &str| (var == "SWITCHYARD_CLANG").then(|| "/nonexistent/clang".into());
        let e = format!("{:#}", resolve(&named, tools).unwrap_err());
        assert!(e.contains("SWITCHYARD_CLANG=/nonexistent/clang did not run"), "{e}");
        assert!(e.contains("apt-get install clang-19 lld-19"), "{e}");
        // Nothing on the PATH, not even python3: the PyPI install cannot run either.
        let empty = |var: &str| (var == "PATH").then(|| "/nonexistent/bin".into());
        let e = format!("{:#}", resolve(&empty, tools).unwrap_err());
        assert!(e.contains("found no clang-19 with wasm-ld-19 nor clang with wasm-ld on the PATH"), "{e}");
        assert!(e.contains("needs python3"), "{e}");
        assert!(e.contains("SWITCHYARD_CLANG=/path/to/clang and SWITCHYARD_WASM_LD=/path/to/wasm-ld"), "{e}");
    }

    #[test]
    fn the_sdk_replaces_the_bindings_weak_post_returns_of_score_and_filter() {
        let files = sdk_files().unwrap();
        let text = |name: &str| {
            String::from_utf8_lossy(&files.iter().find(|(n, _)| n == name).unwrap().1).into_owned()
        };
        let (bindings, glue) = (text("selection_policy.c"), text("switchyard.c"));
        for (function, export) in [("score", NOT_EXPORTED[0]), ("filter", NOT_EXPORTED[1])] {
            let symbol = format!("__wasm_export_exports_switchyard_policy_policy_{function}_post_return(");
            let weak = format!("__attribute__((__weak__, __export_name__(\"{export}\")))\nvoid {symbol}");
            assert!(
                bindings.contains(&weak),
                "the bindings' {function} post-return is weak and exported as {export}"
            );
            assert!(glue.contains(&format!("void {symbol}")), "switchyard.c replaces it");
        }
    }

    #[test]
    fn a_module_that_exports_a_post_return_of_score_or_filter_is_refused() {
        use wasm_encoder::{
            CodeSection, ExportKind, ExportSection, Function, FunctionSection, Module, TypeSection,
        };
        let module = |export: &str| {
            let mut m = Module::new();
            let mut types = TypeSection::new();
            types.ty().function([], []);
            m.section(&types);
            let mut functions = FunctionSection::new();
            functions.function(0);
            m.section(&functions);
            let mut exports = ExportSection::new();
            exports.export(export, ExportKind::Func, 0);
            m.section(&exports);
            let mut code = CodeSection::new();
            let mut body = Function::new([]);
            body.instructions().end();
            code.function(&body);
            m.section(&code);
            m.finish()
        };
        let e = refuse_exports(&module(NOT_EXPORTED[1]), NOT_EXPORTED).unwrap_err().to_string();
        assert!(e.contains("#filter") && e.contains("reused answer"), "{e}");
        refuse_exports(&module("cabi_post_switchyard:policy/policy@0.2.0#configure"), NOT_EXPORTED).unwrap();
    }
}
