//! The built components target the world and import nothing outside it (no WASI).

use switchyard::{LoadErrorKind, PolicyComponent};
use wasmparser::{Parser, Payload};

use switchyard_test_util::fixtures::{DEFAULT_POLICY, PROBE, engine};

/// Top-level import names of a component, read with wasmparser (independently of the
/// runtime's own validation).
fn component_imports(bytes: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.expect("valid wasm") {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth -= 1,
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    names.push(import.expect("valid import").name.0.to_string());
                }
            }
            _ => {}
        }
    }
    names
}

#[test]
fn builtin_and_test_components_import_only_the_policy_world() {
    let mut checked = 0;
    let builtins = switchyard_builtins::BUILTINS.iter().map(|b| (b.name, b.component));
    for (name, bytes) in builtins.chain([("probe", PROBE), ("default (test build)", DEFAULT_POLICY)]) {
        let imports = component_imports(bytes);
        assert!(!imports.is_empty(), "{name}: reads the request interface");
        for import in &imports {
            assert!(import.starts_with("switchyard:policy/"), "{name} imports {import}");
            assert!(!import.starts_with("wasi:"), "{name} imports WASI: {import}");
        }
        let loaded = PolicyComponent::load(engine(), bytes).expect("loads");
        assert_eq!(loaded.imports(), imports.as_slice());
        assert!(loaded.exports().iter().any(|e| e == "switchyard:policy/policy@0.2.0"));
        checked += 1;
    }
    assert_eq!(checked, switchyard_builtins::BUILTINS.len() + 2);
}

#[test]
fn files_that_are_not_components_are_refused_with_their_kind() {
    let cases: [(&[u8], LoadErrorKind); 4] = [
        (b"{\"not\": \"wasm\"}", LoadErrorKind::NotWasm),
        (b"", LoadErrorKind::NotWasm),
        // The smallest core module: magic + version 1.
        (b"\0asm\x01\0\0\0", LoadErrorKind::CoreModule),
        // A component header followed by garbage.
        (b"\0asm\x0d\0\x01\0\xff\xff\xff", LoadErrorKind::CompileFailed),
    ];
    for (bytes, kind) in cases {
        let err = PolicyComponent::load(engine(), bytes).err().expect("refused");
        assert_eq!(err.kind, kind, "{err}");
    }
}
