//! What a compile worker process runs ([`serve_worker`]): the other side of
//! [`crate::compile_worker`], which starts it and reads its answers.

use std::io::{BufReader, BufWriter, Read};
use std::time::Duration;

use crate::compile_worker::{Settings, WORKER_IDLE_EXIT, read_frame, write_answer};
use crate::engine::{Limits, PolicyEngine};

/// Sets the soft limit of a resource of this process (at most its hard limit, which is
/// left as it is: lowering it could not be undone).
fn set_soft_limit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid `rlimit` for getrlimit to write and setrlimit to read.
    unsafe {
        if libc::getrlimit(resource, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit.rlim_cur = value.min(limit.rlim_max);
        if libc::setrlimit(resource, &limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPU time this process has used, whole seconds.
fn own_cpu_seconds() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is valid for clock_gettime to write.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    now.tv_sec as u64
}

/// Whether standard input has something to read (or is closed) within `within`.
fn readable_within(within: Duration) -> bool {
    let mut fd = libc::pollfd { fd: libc::STDIN_FILENO, events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(within.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fd` is one valid `pollfd` for poll to read and write.
    let ready = unsafe { libc::poll(&mut fd, 1, ms) };
    // An error (EINTR, say) is not an idle timeout: the read that follows finds out.
    ready != 0
}

/// Serves compile jobs on standard input and output until the input closes, or no job
/// came for a minute: what a worker process runs (`switchyard compile-worker`). Errors
/// only if the parent's stream is broken.
pub fn serve_worker() -> anyhow::Result<()> {
    let (mut input, mut output) =
        (BufReader::new(std::io::stdin().lock()), BufWriter::new(std::io::stdout().lock()));
    let settings: Settings<Limits> = serde_json::from_slice(&read_frame(&mut input, 1 << 20)?)?;
    if settings.background {
        // Before any thread starts: they inherit it.
        crate::engine::lower_thread_priority();
    }
    let timeout = Duration::from_millis(settings.limits.compile_timeout_ms);
    let max_bytes = settings.limits.max_component_bytes as u64;
    let memory = settings.limits.compile_memory_bytes;
    // One pool slot: the worker only compiles, and the pool's per-component caps (which
    // refuse a component over the limits) are the parent's.
    let engine = PolicyEngine::new(Limits { max_instances: 1, ..settings.limits })?;
    // Cranelift's threads (rayon's global pool, which wasmtime compiles on) start now,
    // before the limit: a compile over it then dies at its allocation, not half-way
    // through starting a pool it waits for.
    rayon::ThreadPoolBuilder::new().build_global().ok();
    // What is bounded is what compiles allocate.
    set_soft_limit(libc::RLIMIT_DATA, memory)?;
    loop {
        if input.buffer().is_empty() && !readable_within(WORKER_IDLE_EXIT) {
            return Ok(());
        }
        let mut tier = [0u8];
        match input.read_exact(&mut tier) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let bytes = read_frame(&mut input, max_bytes)?;
        let target = match tier[0] {
            0 => &engine,
            _ => engine.first_tier().unwrap_or(&engine),
        };
        // A backstop should the parent stop watching: the CPU time a compile may take on
        // every core for twice its deadline, then SIGXCPU.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let allowed = own_cpu_seconds() + (timeout.as_secs() + 1) * 2 * cores;
        set_soft_limit(libc::RLIMIT_CPU, allowed)?;
        let compiled = wasmtime::component::Component::new(target.engine(), &bytes)
            .and_then(|c| c.serialize())
            .map_err(|e| {
                let message = format!("{e:#}");
                if message.contains(&format!("os error {}", libc::ENOMEM)) {
                    format!(
                        "{message}: over the compile's memory limit (`compile_memory_bytes`, {memory} bytes)"
                    )
                } else {
                    message
                }
            });
        let stats = engine.own_function_cache_stats().unwrap_or_default();
        write_answer(&mut output, compiled.as_deref().map_err(String::as_str), stats)?;
    }
}
