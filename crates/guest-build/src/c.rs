//! The C SDK (`guest-sdk/c/`) and the build of a policy written in C: bindings generated
//! from `wit/policy.wit` by wit-bindgen's C generator, the SDK's hand-written files,
//! clang for wasm32 (SIMD, no libc, no WASI) linked by wasm-ld, and the same wrap step as
//! a Rust guest ([`super::componentize`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
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
/// pads them to 5 bytes otherwise: ~8 % of the default policy's module).
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
/// selection over 1,024 workers took 1.11 × the Rust guest's time, 0.94–0.97 × built by
/// clang 19 (BENCHMARKS.md, "A policy in C").
pub const PREFERRED_CLANG: &str = "clang-19";

/// The clang to build with: `$SWITCHYARD_CLANG`, else [`PREFERRED_CLANG`] if it runs,
/// else `clang` on the PATH; and the wasm-ld it links with. A clear error if either is
/// missing.
pub fn clang() -> Result<PathBuf> {
    if let Some(named) = std::env::var_os("SWITCHYARD_CLANG") {
        return clang_at(PathBuf::from(named));
    }
    clang_at(PathBuf::from(PREFERRED_CLANG)).or_else(|_| clang_at(PathBuf::from("clang")))
}

/// [`clang`] for a given program.
fn clang_at(clang: PathBuf) -> Result<PathBuf> {
    let install = "install clang and lld (Debian/Ubuntu: `apt-get install clang-19 lld-19`, \
                   or `clang lld`), or set SWITCHYARD_CLANG to a clang that targets wasm32";
    let ok = |cmd: &mut Command| cmd.output().map(|o| o.status.success()).unwrap_or(false);
    if !ok(Command::new(&clang).arg("--version")) {
        bail!("C guests need clang, and `{}` did not run: {install}", clang.display());
    }
    // clang finds wasm-ld beside itself or on the PATH; ask it which.
    let ld = Command::new(&clang)
        .args(["--target=wasm32-unknown-unknown", "-print-prog-name=wasm-ld"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if ld.is_empty() || !ok(Command::new(&ld).arg("--version")) {
        bail!("C guests are linked by wasm-ld (from lld), and `{ld}` did not run: {install}");
    }
    Ok(clang)
}

/// Builds a policy written in C: its `sources` (`-O3`) and the SDK (`-Oz`, bindings
/// generated into `work_dir`), linked into `work_dir/<name>.core.wasm`, then wrapped as a
/// component by the same step as a Rust guest. Returns the component.
pub fn build_c_guest(work_dir: &Path, name: &str, sources: &[PathBuf]) -> Result<Vec<u8>> {
    let clang = clang()?;
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
        run(Command::new(&clang)
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
    run(Command::new(&clang).args(LINK_FLAGS).args(&linked).arg("-o").arg(&core))
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
        let e = clang_at("/nonexistent/clang".into()).unwrap_err().to_string();
        assert!(e.contains("`/nonexistent/clang` did not run"), "{e}");
        assert!(e.contains("apt-get install clang-19 lld-19"), "{e}");
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
