//! Components a real toolchain could have made, with arbitrary code inside: `wasm-smith`
//! generates a core module of exactly the imports and exports of a builtin's core module
//! (so the host's world and import checks pass), the builtin's `component-type` section
//! is appended (the WIT the guest SDK embeds), and the guest SDK wraps it as a component,
//! as `switchyard policy wrap` does. What such a component does at instantiation,
//! `configure` and `score` is arbitrary: traps, loops, wrong lengths, odd allocations.

use std::sync::OnceLock;

use arbitrary::Unstructured;
use switchyard_builtins::BUILTINS;
use wasmparser::{Parser, Payload};

/// A builtin's core module (the largest module inside its component) and its
/// `component-type` custom sections, encoded as sections.
struct Template {
    core: Vec<u8>,
    custom: Vec<u8>,
}

/// Appends `value` as unsigned LEB128, the length encoding of every wasm section.
fn leb(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn template(component: &[u8]) -> Template {
    let mut core: &[u8] = &[];
    for payload in Parser::new(0).parse_all(component) {
        if let Ok(Payload::ModuleSection { unchecked_range, .. }) = payload
            && unchecked_range.len() > core.len()
        {
            core = &component[unchecked_range];
        }
    }
    let mut custom = Vec::new();
    for payload in Parser::new(0).parse_all(core) {
        if let Ok(Payload::CustomSection(reader)) = payload
            && reader.name().starts_with("component-type")
        {
            let mut body = Vec::new();
            leb(&mut body, reader.name().len());
            body.extend_from_slice(reader.name().as_bytes());
            body.extend_from_slice(reader.data());
            custom.push(0);
            leb(&mut custom, body.len());
            custom.extend(body);
        }
    }
    Template { core: core.to_vec(), custom }
}

fn templates() -> &'static [Template] {
    static TEMPLATES: OnceLock<Vec<Template>> = OnceLock::new();
    TEMPLATES.get_or_init(|| BUILTINS.iter().map(|b| template(b.component)).collect())
}

/// A component generated from `u`, or `None` when the guest SDK could not wrap the module
/// (which a tenant could not upload either).
pub fn component(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<Vec<u8>>> {
    let all = templates();
    let t = &all[u.choose_index(all.len())?];
    let mut config = wasm_smith::Config {
        module_shape: Some(t.core.clone()),
        // What the host's engine runs (no GC, exceptions, threads or memory64): a module
        // that uses them only meets `compile-failed`, a shallower refusal.
        gc_enabled: false,
        exceptions_enabled: false,
        threads_enabled: false,
        shared_everything_threads_enabled: false,
        memory64_enabled: false,
        tail_call_enabled: false,
        max_funcs: 20,
        max_memory32_bytes: 1 << 24,
        ..wasm_smith::Config::default()
    };
    config.max_type_size = 200;
    let module = wasm_smith::Module::new(config, u)?;
    let mut core = module.to_bytes();
    core.extend_from_slice(&t.custom);
    Ok(switchyard_guest_build::componentize(&core).ok())
}
