//! Loading an uploaded component: validate, compile ourselves, pre-instantiate.
//! Tenants' bytes are only ever compiled here, never deserialized as artifacts.

use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker};

use crate::compile_worker::{Clock, CpuClock, WorkerError};
use crate::engine::PolicyEngine;
use crate::host::HostState;
use crate::selection::wire::ErrorKind;
use crate::selection::{Fault, FaultKind};

/// The interfaces a policy may import: the world's, and nothing else (no WASI).
pub const ALLOWED_IMPORTS: &[&str] = &["switchyard:policy/types@0.2.0", "switchyard:policy/request@0.2.0"];
/// The interface a policy must export.
pub const POLICY_EXPORT: &str = "switchyard:policy/policy@0.2.0";
/// The world a policy targets.
pub const WORLD: &str = "switchyard:policy/selection-policy@0.2.0";

/// Why a component was refused. Named (and serialised) as its [`ErrorKind`]: a stable
/// interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadErrorKind {
    /// Not WebAssembly (no wasm magic number, or an unknown encoding).
    NotWasm,
    /// A core module, not a component.
    CoreModule,
    /// A component that does not export the policy interface of [`WORLD`].
    WrongWorld,
    /// Imports something outside [`ALLOWED_IMPORTS`] (WASI, say).
    ForbiddenImport,
    /// Over `max_component_bytes`, or declares a memory or table over the limits.
    TooLarge,
    /// Cranelift refused it.
    CompileFailed,
    /// Compiling took longer than `compile_timeout_ms`.
    CompileTimeout,
    /// `configure` refused the parameters, or faulted.
    ConfigureFailed,
    /// Instantiation failed (a start function that faulted, a limit).
    InstantiateFailed,
}

impl LoadErrorKind {
    /// The stable name: the [`ErrorKind`]'s it is reported as.
    pub fn as_str(self) -> &'static str {
        ErrorKind::from(self).as_str()
    }
}

impl From<LoadErrorKind> for ErrorKind {
    fn from(kind: LoadErrorKind) -> Self {
        match kind {
            LoadErrorKind::NotWasm => ErrorKind::NotWasm,
            LoadErrorKind::CoreModule => ErrorKind::CoreModule,
            LoadErrorKind::WrongWorld => ErrorKind::WrongWorld,
            LoadErrorKind::ForbiddenImport => ErrorKind::ForbiddenImport,
            LoadErrorKind::TooLarge => ErrorKind::TooLarge,
            LoadErrorKind::CompileFailed => ErrorKind::CompileFailed,
            LoadErrorKind::CompileTimeout => ErrorKind::CompileTimeout,
            LoadErrorKind::ConfigureFailed => ErrorKind::ConfigureFailed,
            LoadErrorKind::InstantiateFailed => ErrorKind::InstantiateFailed,
        }
    }
}

/// A refused component: the kind, and the detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", kind.as_str())]
pub struct LoadError {
    /// Why, by its stable name.
    pub kind: LoadErrorKind,
    /// The detail, for the tenant: the limit, the import, the compiler's or guest's error.
    pub message: String,
    /// When the guest ran and faulted (a start function or `configure` that spins,
    /// traps or allocates without bound): how. `None` for a refusal before running.
    pub fault: Option<FaultKind>,
}

impl LoadError {
    /// Refused before the guest ran (`fault` is `None`).
    pub fn new(kind: LoadErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), fault: None }
    }

    /// Refused because the guest faulted while instantiating or configuring.
    pub fn faulted(kind: LoadErrorKind, fault: Fault) -> Self {
        Self { kind, message: fault.to_string(), fault: Some(fault.kind) }
    }
}

/// Where the policy interface's functions are in a component, found by name once when it
/// is loaded: an instance then fetches each by index, and the types are checked on the
/// component's first instance only (name lookups and type checks would otherwise be a
/// measurable share of every fresh instance).
#[derive(Debug)]
pub(crate) struct ExportIndices {
    pub(crate) configure: ComponentExportIndex,
    pub(crate) describe: ComponentExportIndex,
    pub(crate) score: ComponentExportIndex,
    pub(crate) filter: ComponentExportIndex,
    pub(crate) on_selected: ComponentExportIndex,
}

impl ExportIndices {
    /// The indices of `component`'s policy functions; the error names a missing one.
    pub(crate) fn of(component: &Component) -> Result<Self, String> {
        let iface = component
            .get_export_index(None, POLICY_EXPORT)
            .ok_or_else(|| format!("no `{POLICY_EXPORT}` export"))?;
        let func = |name: &str| {
            component.get_export_index(Some(&iface), name).ok_or_else(|| format!("no `{name}` export"))
        };
        Ok(Self {
            configure: func("configure")?,
            describe: func("describe")?,
            score: func("score")?,
            filter: func("filter")?,
            on_selected: func("on-selected")?,
        })
    }
}

/// A validated, compiled, pre-instantiated policy component.
#[derive(Clone)]
pub struct PolicyComponent {
    inner: Arc<Inner>,
}

struct Inner {
    engine: PolicyEngine,
    pre: InstancePre<HostState>,
    exports_at: ExportIndices,
    /// Set once the policy functions' types have been checked (on the first instance).
    types_checked: OnceLock<()>,
    digest: String,
    size: usize,
    imports: Vec<String>,
    exports: Vec<String>,
    compile_time: Duration,
    from_cache: bool,
}

impl PolicyComponent {
    /// Validates and compiles `bytes`. Blocking (compilation takes milliseconds to
    /// seconds): call it off any async runtime.
    pub fn load(engine: &PolicyEngine, bytes: &[u8]) -> Result<Self, LoadError> {
        Self::load_holding(engine, bytes, ())
    }

    /// [`load`](Self::load), with `held` moved into the compiler thread and dropped when
    /// Cranelift returns, even after `compile_timeout_ms` made this call return
    /// `compile-timeout` (Cranelift cannot be cancelled). A caller bounding how many
    /// compiles run at once passes its permit here, so the bound holds against slow
    /// compiles too. Without a compile (refused early, or found in the artifact cache)
    /// `held` is dropped before this returns.
    pub fn load_holding<H: Send + 'static>(
        engine: &PolicyEngine,
        bytes: &[u8],
        held: H,
    ) -> Result<Self, LoadError> {
        Self::load_timed(engine, bytes, held, Clock::Wall)
    }

    /// [`load_holding`](Self::load_holding) for a compile in the background (a tier-up,
    /// at the lowest CPU priority): `compile_timeout_ms` counts the CPU time of the
    /// thread compiling, not the wall-clock time, which a busy host would stretch past any
    /// bound while the compile waits for CPU. (Meant for an engine that compiles on that
    /// one thread, as `tiered`'s Cranelift engine does: work on rayon's threads would not
    /// be counted.)
    pub fn load_in_background<H: Send + 'static>(
        engine: &PolicyEngine,
        bytes: &[u8],
        held: H,
    ) -> Result<Self, LoadError> {
        Self::load_timed(engine, bytes, held, Clock::CompilerCpu)
    }

    fn load_timed<H: Send + 'static>(
        engine: &PolicyEngine,
        bytes: &[u8],
        held: H,
        clock: Clock,
    ) -> Result<Self, LoadError> {
        within_size(engine, bytes.len())?;
        if !bytes.starts_with(b"\0asm") || bytes.len() < 8 {
            return Err(LoadError::new(
                LoadErrorKind::NotWasm,
                "the file does not start with the wasm magic number",
            ));
        }
        if wasmparser::Parser::is_core_wasm(bytes) {
            return Err(LoadError::new(
                LoadErrorKind::CoreModule,
                "this is a core wasm module, not a component; wrap it with \
                 `switchyard policy wrap CORE.wasm -o POLICY.wasm` (in a build script: \
                 switchyard_guest_build::componentize)",
            ));
        }
        if !wasmparser::Parser::is_component(bytes) {
            return Err(LoadError::new(LoadErrorKind::NotWasm, "unknown wasm encoding version"));
        }
        let started = Instant::now();
        // Hashed once: the cache's key and the component's digest.
        let digest = hex::encode(Sha256::digest(bytes));
        let cached = engine.artifact_cache().and_then(|cache| cache.load(engine.engine(), &digest));
        let from_cache = cached.is_some();
        let component = match cached {
            Some(component) => component,
            None => {
                let (component, serialised) = compile_with_timeout(engine, bytes, held, clock)?;
                if let Some(cache) = engine.artifact_cache() {
                    // Caching is an optimisation: a full disk must not refuse the upload.
                    let _ = match &serialised {
                        Some(serialised) => cache.store_serialized(engine.engine(), &digest, serialised),
                        None => cache.store(engine.engine(), &digest, &component),
                    };
                }
                component
            }
        };
        Self::checked(engine, component, digest, bytes.len(), started.elapsed(), from_cache)
    }

    /// The component whose bytes have the sha256 `digest` and are `size` bytes long,
    /// from the engine's artifact cache, without its bytes: what a version that was
    /// loaded before (and evicted) loads again from. `None`: no cache, or no usable
    /// artifact (the caller loads from the bytes). The caller vouches for `digest`: it
    /// only picks which of our own compilations is loaded (each keyed by the sha256 of
    /// the bytes it was compiled from), and the component is checked against the world
    /// like any other.
    pub fn load_cached(engine: &PolicyEngine, digest: &str, size: usize) -> Option<Result<Self, LoadError>> {
        if let Err(e) = within_size(engine, size) {
            return Some(Err(e));
        }
        // A file name is made of it: nothing but a sha256's 64 hex digits.
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let started = Instant::now();
        let component = engine.artifact_cache()?.load(engine.engine(), digest)?;
        Some(Self::checked(engine, component, digest.to_string(), size, started.elapsed(), true))
    }

    /// `component`, checked against the world (imports, the policy export) and
    /// pre-instantiated.
    fn checked(
        engine: &PolicyEngine,
        component: Component,
        digest: String,
        size: usize,
        compile_time: Duration,
        from_cache: bool,
    ) -> Result<Self, LoadError> {
        let ty = component.component_type();
        let wasmtime_engine = engine.engine();
        let imports: Vec<String> = ty.imports(wasmtime_engine).map(|(name, _)| name.to_string()).collect();
        let exports: Vec<String> = ty.exports(wasmtime_engine).map(|(name, _)| name.to_string()).collect();
        if let Some(bad) = imports.iter().find(|name| !ALLOWED_IMPORTS.contains(&name.as_str())) {
            let why = if bad.starts_with("wasi:") { " (the host grants no WASI capabilities)" } else { "" };
            return Err(LoadError::new(
                LoadErrorKind::ForbiddenImport,
                format!("imports `{bad}`{why}; a policy may import only {}", ALLOWED_IMPORTS.join(", ")),
            ));
        }
        if !exports.iter().any(|name| name == POLICY_EXPORT) {
            return Err(LoadError::new(
                LoadErrorKind::WrongWorld,
                format!(
                    "exports [{}] but not `{POLICY_EXPORT}`; build it for the world `{WORLD}`",
                    exports.join(", ")
                ),
            ));
        }
        let mut linker = Linker::<HostState>::new(wasmtime_engine);
        crate::host::add_imports(&mut linker)
            .map_err(|e| LoadError::new(LoadErrorKind::InstantiateFailed, format!("{e:#}")))?;
        let wrong_world =
            |e: String| LoadError::new(LoadErrorKind::WrongWorld, format!("does not match `{WORLD}`: {e}"));
        let pre = linker.instantiate_pre(&component).map_err(|e| wrong_world(format!("{e:#}")))?;
        // The policy functions, found by name (their types are checked on the first
        // instance: `GuestScorer`).
        let exports_at = ExportIndices::of(&component).map_err(wrong_world)?;
        Ok(Self {
            inner: Arc::new(Inner {
                engine: engine.clone(),
                pre,
                exports_at,
                types_checked: OnceLock::new(),
                digest,
                size,
                imports,
                exports,
                compile_time,
                from_cache,
            }),
        })
    }

    /// The engine it was compiled by, and whose limits its instances run under.
    pub fn engine(&self) -> &PolicyEngine {
        &self.inner.engine
    }
    pub(crate) fn instance_pre(&self) -> &InstancePre<HostState> {
        &self.inner.pre
    }
    pub(crate) fn export_indices(&self) -> &ExportIndices {
        &self.inner.exports_at
    }
    /// Runs `check` (the policy functions' type check) unless it has passed once for
    /// this component.
    pub(crate) fn types_checked<E>(&self, check: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        if self.inner.types_checked.get().is_none() {
            check()?;
            let _ = self.inner.types_checked.set(());
        }
        Ok(())
    }
    /// sha256 of the component bytes, hex.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }
    /// Size of the component, bytes.
    pub fn size(&self) -> usize {
        self.inner.size
    }
    /// The interfaces it imports (a subset of [`ALLOWED_IMPORTS`]).
    pub fn imports(&self) -> &[String] {
        &self.inner.imports
    }
    /// The interfaces it exports ([`POLICY_EXPORT`] among them).
    pub fn exports(&self) -> &[String] {
        &self.inner.exports
    }
    /// Time to compile (or load from the artifact cache).
    pub fn compile_time(&self) -> Duration {
        self.inner.compile_time
    }
    /// Which compiler's code this is: Winch's or Cranelift's.
    pub fn compiled_by(&self) -> crate::Compiler {
        self.inner.engine.limits().compiler.of_code()
    }
    /// Whether the compiled code came from the artifact cache.
    pub fn from_cache(&self) -> bool {
        self.inner.from_cache
    }
}

/// Refuses a component of `size` bytes over `max_component_bytes` (`too-large`).
fn within_size(engine: &PolicyEngine, size: usize) -> Result<(), LoadError> {
    let most = engine.limits().max_component_bytes;
    if size > most {
        return Err(LoadError::new(
            LoadErrorKind::TooLarge,
            format!("{size} bytes; the limit is {most} bytes"),
        ));
    }
    Ok(())
}

/// Compiles `bytes` within `compile_timeout_ms`: in a worker process when the engine has
/// them (killed at the deadline, `held` dropped then), else on a separate thread so a
/// pathological input cannot hold the caller past it (Cranelift cannot be cancelled: a
/// timed-out compile finishes in the background and is dropped, and `held` with it). With
/// the component, its serialisation when a worker made it (what the cache stores).
fn compile_with_timeout<H: Send + 'static>(
    engine: &PolicyEngine,
    bytes: &[u8],
    held: H,
    clock: Clock,
) -> Result<(Component, Option<Vec<u8>>), LoadError> {
    let timeout = Duration::from_millis(engine.limits().compile_timeout_ms);
    let timed_out = || {
        LoadError::new(
            LoadErrorKind::CompileTimeout,
            format!("compilation took longer than {} ms", timeout.as_millis()),
        )
    };
    if let Some((workers, tier)) = engine.compile_in() {
        let serialised = workers.compile(tier, bytes, timeout, clock);
        drop(held);
        let serialised = match serialised {
            Ok(serialised) => serialised,
            Err(WorkerError::Timeout) => return Err(timed_out()),
            Err(WorkerError::Refused(message)) => return Err(compile_error(message)),
            Err(WorkerError::Failed(message)) => {
                return Err(LoadError::new(LoadErrorKind::CompileFailed, message));
            }
        };
        // SAFETY: `deserialize` trusts its input to be wasmtime's own output for this
        // engine's settings. These bytes are `Component::serialize` of a component our
        // worker compiled: this program, run by us, with an engine built from this
        // engine's limits, answering over a pipe only it and we hold. wasmtime checks the
        // header (its version, the engine's settings) and refuses a mismatch.
        let component = unsafe { Component::deserialize(engine.engine(), &serialised) }
            .map_err(|e| compile_error(format!("{e:#}")))?;
        return Ok((component, Some(serialised)));
    }
    let (tx, rx) = mpsc::channel();
    // The compiler thread's CPU clock, only for a CPU-time bound (an upload waits on
    // nothing but the compile).
    let (cpu_tx, cpu_rx) = mpsc::channel();
    let cpu_tx = (clock == Clock::CompilerCpu).then_some(cpu_tx);
    let wasmtime_engine = engine.engine().clone();
    let owned = bytes.to_vec();
    std::thread::Builder::new()
        .name("switchyard-compile".into())
        .spawn(move || {
            if let Some(cpu_tx) = cpu_tx {
                let _ = cpu_tx.send(CpuClock::of_this_thread());
            }
            let compiled = Component::new(&wasmtime_engine, &owned);
            // Cranelift is done: release what the caller asked to hold until now.
            drop(held);
            let _ = tx.send(compiled);
        })
        .map_err(|e| {
            LoadError::new(LoadErrorKind::CompileFailed, format!("spawning the compiler thread: {e}"))
        })?;
    // No clock (not asked for, or the platform has none): the wall clock bounds it.
    let received = match cpu_rx.recv().ok().flatten() {
        Some(cpu) => loop {
            // Polled: the compiler's CPU time is only known by asking.
            match rx.recv_timeout(Duration::from_millis(20)) {
                Err(mpsc::RecvTimeoutError::Timeout) if cpu.elapsed() < timeout => continue,
                other => break other,
            }
        },
        None => rx.recv_timeout(timeout),
    };
    match received {
        Ok(Ok(component)) => Ok((component, None)),
        Ok(Err(e)) => Err(compile_error(format!("{e:#}"))),
        Err(_) => Err(timed_out()),
    }
}

/// The refusal for a compiler's error `message`.
fn compile_error(message: String) -> LoadError {
    // The pooling allocator checks declared memories and tables against the limits at
    // compile time: a memory (e.g. a huge data segment) over `max_memory_bytes` is too
    // large, not malformed.
    if message.contains("pooling allocator") && message.contains("exceeds the limit") {
        LoadError::new(LoadErrorKind::TooLarge, format!("over the memory or table limits: {message}"))
    } else {
        LoadError::new(LoadErrorKind::CompileFailed, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The background bound counts a thread's CPU time, not the time it waited: a thread
    /// that sleeps 200 ms has used next to no CPU (a wall clock would read ≥ 200 ms).
    #[test]
    fn a_threads_cpu_clock_counts_its_work_not_its_waiting() {
        let (sleeper, busy) = std::thread::scope(|s| {
            let time = |work: fn()| {
                s.spawn(move || {
                    let clock = CpuClock::of_this_thread().expect("Linux gives threads a CPU clock");
                    work();
                    clock.elapsed()
                })
            };
            let sleeper = time(|| std::thread::sleep(Duration::from_millis(200)));
            let busy = time(|| {
                let started = Instant::now();
                while started.elapsed() < Duration::from_millis(50) {
                    std::hint::spin_loop();
                }
            });
            (sleeper.join().unwrap(), busy.join().unwrap())
        });
        assert!(sleeper < Duration::from_millis(50), "a sleeping thread's CPU time: {sleeper:?}");
        assert!(busy >= Duration::from_millis(10), "a spinning thread's CPU time: {busy:?}");
    }
}
