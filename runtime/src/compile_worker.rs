//! Compiles in a child process that can be killed at its deadline.
//!
//! Cranelift cannot be interrupted inside a process: a compile past `compile_timeout_ms`
//! would go on using a core (and whatever permit bounds compiles) until it returns. In a
//! worker process it stops when the worker is killed, at the deadline, and the worker's
//! memory (`compile_memory_bytes`, as `RLIMIT_DATA`) and CPU time (`RLIMIT_CPU`, a
//! backstop should its parent stop watching) are bounded by the kernel.
//!
//! A worker is this program run again ([`WorkerCommand`], e.g. `switchyard
//! compile-worker`), serving [`crate::compile_worker_main::serve_worker`]. It builds
//! the parent's engine from the same [`crate::Limits`] and answers each job with wasmtime's
//! serialisation of the component, which the parent deserialises: the same binary, the
//! same engine settings, over a pipe only the two share. A worker that answered is kept
//! for the next compile (its engine and Cranelift's function cache stay warm); one killed
//! at its deadline, or that died, is replaced by a fresh one on the next compile.
//!
//! Wire format (little-endian): the parent first sends the worker's settings (`u64` length,
//! JSON), then one job at a time: the engine (`u8`: 0 the engine, 1 its first tier), the
//! component's length (`u64`) and bytes. Each answer: a status (`u8`: 0 compiled, 1
//! refused), a length (`u64`) and the serialised component or the error message, then the
//! worker's function-cache counters (`u64` hits, misses, entries, bytes).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::function_cache::FunctionCacheStats;

/// The largest answer read from a worker: a 4 MiB component compiles to a few tens of MB.
const MAX_ANSWER_BYTES: u64 = 1 << 30;

/// Idle workers kept for later compiles, of each kind: more would only hold memory (each
/// keeps an engine and up to `function_cache_bytes` of compiled functions).
const MAX_IDLE_WORKERS: usize = 2;

/// A worker with no job for this long exits, and its memory goes back: compiles come in
/// bursts (a deploy, a restart), and a fresh worker costs its first compile a start.
pub(crate) const WORKER_IDLE_EXIT: Duration = Duration::from_secs(60);

/// An idle worker is handed a job only if it has been idle less than this: well before
/// it exits by itself, so no job is sent to a worker on its way out.
const WORKER_IDLE_REUSE: Duration = Duration::from_secs(30);

/// How to start a worker: a program and its arguments, run with piped standard input and
/// output (its standard error is the parent's).
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    program: PathBuf,
    args: Vec<OsString>,
}

impl WorkerCommand {
    /// `program args…`, which must call [`crate::compile_worker_main::serve_worker`].
    pub fn new(program: impl Into<PathBuf>, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        Self { program: program.into(), args: args.into_iter().map(Into::into).collect() }
    }

    /// This very executable with `args` (a binary that serves workers under a subcommand).
    pub fn current_exe(args: impl IntoIterator<Item = impl Into<OsString>>) -> std::io::Result<Self> {
        Ok(Self::new(std::env::current_exe()?, args))
    }
}

/// Which of a [`PolicyEngine`]'s compilers a job is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Tier {
    /// The engine's own compiler.
    Main = 0,
    /// Its first tier (`compiler = "tiered"`: Winch).
    First = 1,
}

/// What `compile_timeout_ms` is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clock {
    /// Wall-clock time: an upload's answer comes within the bound.
    Wall,
    /// The compiler's CPU time (its thread's in-process, its worker's), the compiler
    /// running at the lowest priority: a background compile is bounded by the work it
    /// does, not by how long it waits for a CPU.
    CompilerCpu,
}

/// Why a worker did not compile a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WorkerError {
    /// The compiler refused it; its message.
    Refused(String),
    /// Past the deadline: the worker was killed.
    Timeout,
    /// The worker could not be started, or died (a signal, its memory limit): what happened.
    Failed(String),
}

/// The settings a worker starts with.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Settings<L> {
    /// The engine's limits (`Limits`, as JSON on the parent's side).
    pub(crate) limits: L,
    /// Run at the lowest priority (background compiles).
    pub(crate) background: bool,
}

/// One answer from a worker.
struct Answer {
    compiled: Result<Vec<u8>, String>,
    stats: FunctionCacheStats,
}

/// A running worker, idle between jobs.
struct Worker {
    /// Since when it has had no job.
    idle_since: Instant,
    child: Child,
    stdin: BufWriter<ChildStdin>,
    answers: Receiver<std::io::Result<Answer>>,
}

impl Worker {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it and reaps it: its CPU and memory are free when this returns.
    fn kill(mut self) -> Option<ExitStatus> {
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

/// Counters of the workers, for metrics.
#[derive(Debug, Default)]
struct Counters {
    spawned: AtomicU64,
    killed: AtomicU64,
    died: AtomicU64,
}

/// What the workers' function caches hold and answered: the live workers' latest counts,
/// and the hits and misses of workers gone.
#[derive(Debug, Default)]
struct CacheTotals {
    live: HashMap<u32, FunctionCacheStats>,
    gone: FunctionCacheStats,
}

/// Compiles for one [`crate::PolicyEngine`] in worker processes (see the module's documentation).
pub struct CompileWorkers {
    command: WorkerCommand,
    /// The engine's `Limits`, as the worker builds its engine from them.
    limits: serde_json::Value,
    /// Their `compile_memory_bytes`, for the refusals that name it.
    memory_bytes: u64,
    idle: Mutex<Vec<(bool, Worker)>>,
    counters: Counters,
    caches: Mutex<CacheTotals>,
}

impl std::fmt::Debug for CompileWorkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileWorkers")
            .field("command", &self.command)
            .field("spawned", &self.spawned())
            .field("killed", &self.killed())
            .finish_non_exhaustive()
    }
}

/// How many workers were started, killed at their deadline, and found dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkerStats {
    /// Workers started.
    pub spawned: u64,
    /// Workers killed at a compile's deadline.
    pub killed: u64,
    /// Workers that died on their own (a signal, their memory limit).
    pub died: u64,
}

impl CompileWorkers {
    /// Workers started by `command` for an engine built from `limits` (`Limits` as JSON),
    /// which let a worker allocate `memory_bytes`.
    pub(crate) fn new(command: WorkerCommand, limits: serde_json::Value, memory_bytes: u64) -> Self {
        Self {
            command,
            limits,
            memory_bytes,
            idle: Mutex::default(),
            counters: Counters::default(),
            caches: Mutex::default(),
        }
    }

    fn spawned(&self) -> u64 {
        self.counters.spawned.load(Ordering::Relaxed)
    }

    fn killed(&self) -> u64 {
        self.counters.killed.load(Ordering::Relaxed)
    }

    /// Workers started, killed and dead so far.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            spawned: self.spawned(),
            killed: self.killed(),
            died: self.counters.died.load(Ordering::Relaxed),
        }
    }

    /// The function caches of the workers: what the live ones hold, and every hit and
    /// miss since the first worker started.
    pub(crate) fn function_cache_stats(&self) -> FunctionCacheStats {
        let caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        caches.live.values().fold(caches.gone, |sum, s| FunctionCacheStats {
            hits: sum.hits + s.hits,
            misses: sum.misses + s.misses,
            entries: sum.entries + s.entries,
            bytes: sum.bytes + s.bytes,
        })
    }

    fn record(&self, pid: u32, stats: FunctionCacheStats) {
        self.caches.lock().unwrap_or_else(|p| p.into_inner()).live.insert(pid, stats);
    }

    /// A worker is gone: its hits and misses stay counted, its cache's contents do not.
    fn retire(&self, pid: u32) {
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = caches.live.remove(&pid) {
            caches.gone.hits += s.hits;
            caches.gone.misses += s.misses;
        }
    }

    /// An idle worker of the kind, or a new one; whether it is new.
    fn take(&self, background: bool) -> Result<(Worker, bool), WorkerError> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stale: Vec<Worker> = {
            let (stale, fresh) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|(_, w): &(bool, Worker)| w.idle_since.elapsed() >= WORKER_IDLE_REUSE);
            *idle = fresh;
            stale.into_iter().map(|(_, w)| w).collect()
        };
        let found = idle.iter().position(|(b, _)| *b == background).map(|at| idle.swap_remove(at).1);
        drop(idle);
        for worker in stale {
            self.retire(worker.pid());
            worker.kill();
        }
        if let Some(worker) = found {
            return Ok((worker, false));
        }
        Ok((self.spawn(background)?, true))
    }

    fn spawn(&self, background: bool) -> Result<Worker, WorkerError> {
        let failed = |e: std::io::Error| {
            WorkerError::Failed(format!(
                "starting the compile worker {}: {e}",
                self.command.program.display()
            ))
        };
        let mut child = Command::new(&self.command.program)
            .args(&self.command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(failed)?;
        self.counters.spawned.fetch_add(1, Ordering::Relaxed);
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(WorkerError::Failed("the compile worker's pipes were not opened".into()));
        };
        let (tx, answers) = mpsc::channel();
        // The worker's answers are read on a thread of their own, so a wait for one can
        // end at a deadline. It ends when the worker's output closes (it exited or was
        // killed).
        std::thread::Builder::new()
            .name("switchyard-compile-worker".into())
            .spawn(move || {
                let mut stdout = BufReader::new(stdout);
                loop {
                    let answer = read_answer(&mut stdout);
                    let end = answer.is_err();
                    if tx.send(answer).is_err() || end {
                        break;
                    }
                }
            })
            .map_err(failed)?;
        let mut worker = Worker { idle_since: Instant::now(), child, stdin: BufWriter::new(stdin), answers };
        let settings = serde_json::to_vec(&Settings { limits: self.limits.clone(), background })
            .map_err(|e| WorkerError::Failed(format!("the worker's settings: {e}")))?;
        if let Err(e) = write_frame(&mut worker.stdin, &settings).and_then(|()| worker.stdin.flush()) {
            worker.kill();
            return Err(failed(e));
        }
        Ok(worker)
    }

    /// Compiles `bytes` for `tier` in a worker within `timeout` (by `clock`): the
    /// serialised component, or why not. At the deadline the worker is killed (its CPU
    /// and memory are free when this returns).
    pub(crate) fn compile(
        &self,
        tier: Tier,
        bytes: &[u8],
        timeout: Duration,
        clock: Clock,
    ) -> Result<Vec<u8>, WorkerError> {
        let background = clock == Clock::CompilerCpu;
        let (mut worker, mut fresh) = self.take(background)?;
        let job = |worker: &mut Worker| -> std::io::Result<()> {
            worker.stdin.write_all(&[tier as u8])?;
            write_frame(&mut worker.stdin, bytes)?;
            worker.stdin.flush()
        };
        while let Err(e) = job(&mut worker) {
            // It is gone: one kept idle may have died meanwhile (once more, with a fresh
            // one); a fresh one died starting, and that is the answer.
            let died = self.died(worker);
            if fresh {
                return Err(match died {
                    WorkerError::Failed(why) => WorkerError::Failed(format!("{why} (sending it a job: {e})")),
                    other => other,
                });
            }
            (worker, fresh) = (self.spawn(background)?, true);
        }
        let started = Instant::now();
        let cpu = match clock {
            Clock::Wall => None,
            Clock::CompilerCpu => CpuClock::of_process(worker.pid()),
        };
        let cpu_at_start = cpu.as_ref().map(CpuClock::elapsed);
        let answer = loop {
            let waited = match (&cpu, cpu_at_start) {
                (Some(cpu), Some(at_start)) => {
                    // Polled: the worker's CPU time is only known by asking.
                    match worker.answers.recv_timeout(Duration::from_millis(20)) {
                        Err(RecvTimeoutError::Timeout)
                            if cpu.elapsed().saturating_sub(at_start) < timeout =>
                        {
                            continue;
                        }
                        other => other,
                    }
                }
                _ => worker.answers.recv_timeout(timeout.saturating_sub(started.elapsed())),
            };
            break waited;
        };
        match answer {
            Ok(Ok(Answer { compiled, stats })) => {
                self.record(worker.pid(), stats);
                self.put_back(background, worker);
                compiled.map_err(WorkerError::Refused)
            }
            Err(RecvTimeoutError::Timeout) => {
                self.counters.killed.fetch_add(1, Ordering::Relaxed);
                self.retire(worker.pid());
                worker.kill();
                Err(WorkerError::Timeout)
            }
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => Err(self.died(worker)),
        }
    }

    /// A worker that stopped answering: reaped, counted; what happened to it.
    fn died(&self, worker: Worker) -> WorkerError {
        self.counters.died.fetch_add(1, Ordering::Relaxed);
        self.retire(worker.pid());
        let status = worker.kill();
        WorkerError::Failed(match status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s)) {
            Some(libc::SIGABRT | libc::SIGSEGV | libc::SIGBUS) => format!(
                "the compile worker died (signal {}): most likely over its memory limit (`compile_memory_bytes`, {} bytes)",
                status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s)).unwrap_or_default(),
                self.memory_bytes
            ),
            Some(libc::SIGXCPU) => "the compile worker ran out of CPU time".to_string(),
            _ => format!(
                "the compile worker exited ({})",
                status.map_or_else(|| "status unknown".to_string(), |s| s.to_string())
            ),
        })
    }

    fn put_back(&self, background: bool, mut worker: Worker) {
        worker.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.iter().filter(|(b, _)| *b == background).count() < MAX_IDLE_WORKERS {
            idle.push((background, worker));
        } else {
            drop(idle);
            self.retire(worker.pid());
            worker.kill();
        }
    }
}

impl Drop for CompileWorkers {
    fn drop(&mut self) {
        for (_, worker) in self.idle.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            worker.kill();
        }
    }
}

pub(crate) fn write_frame(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(&(bytes.len() as u64).to_le_bytes())?;
    out.write_all(bytes)
}

fn read_u64(input: &mut impl Read) -> std::io::Result<u64> {
    let mut word = [0u8; 8];
    input.read_exact(&mut word)?;
    Ok(u64::from_le_bytes(word))
}

pub(crate) fn read_frame(input: &mut impl Read, max: u64) -> std::io::Result<Vec<u8>> {
    let len = read_u64(input)?;
    if len > max {
        return Err(std::io::Error::other(format!("a frame of {len} bytes, over {max}")));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    input.take(len).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(bytes)
}

/// Writes one answer (see the module's documentation): `compiled`, the serialised
/// component or why not, and the worker's function-cache counters.
pub(crate) fn write_answer(
    output: &mut impl Write,
    compiled: Result<&[u8], &str>,
    stats: FunctionCacheStats,
) -> std::io::Result<()> {
    let (status, payload) = match compiled {
        Ok(serialised) => (0u8, serialised),
        Err(message) => (1u8, message.as_bytes()),
    };
    output.write_all(&[status])?;
    write_frame(output, payload)?;
    for word in [stats.hits, stats.misses, stats.entries as u64, stats.bytes as u64] {
        output.write_all(&word.to_le_bytes())?;
    }
    output.flush()
}

fn read_answer(input: &mut impl Read) -> std::io::Result<Answer> {
    let mut status = [0u8];
    input.read_exact(&mut status)?;
    let payload = read_frame(input, MAX_ANSWER_BYTES)?;
    let mut stats = [0u64; 4];
    for word in &mut stats {
        *word = read_u64(input)?;
    }
    let [hits, misses, entries, bytes] = stats;
    let stats = FunctionCacheStats { hits, misses, entries: entries as usize, bytes: bytes as usize };
    let compiled = match status[0] {
        0 => Ok(payload),
        _ => Err(String::from_utf8_lossy(&payload).into_owned()),
    };
    Ok(Answer { compiled, stats })
}

/// A CPU-time clock: a thread's or a process's (all its threads).
pub(crate) struct CpuClock(libc::clockid_t);

impl CpuClock {
    /// The calling thread's, if the platform gives it.
    pub(crate) fn of_this_thread() -> Option<Self> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: `id` is valid for pthread_getcpuclockid to write; pthread_self is the
        // calling thread, alive for the call.
        let ok = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) } == 0;
        ok.then_some(Self(id))
    }

    /// Process `pid`'s, if the platform gives it.
    fn of_process(pid: u32) -> Option<Self> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: `id` is valid for clock_getcpuclockid to write; an unknown pid is an
        // error return.
        let ok = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut id) } == 0;
        ok.then_some(Self(id))
    }

    /// The CPU time used so far. (Read once the thread or process is gone, it fails:
    /// that is read as zero, and what it ran has answered already.)
    pub(crate) fn elapsed(&self) -> Duration {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `now` is valid for clock_gettime to write; an invalid clock id is an
        // error return, not undefined behaviour.
        if unsafe { libc::clock_gettime(self.0, &mut now) } != 0 {
            return Duration::ZERO;
        }
        Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
    }
}
