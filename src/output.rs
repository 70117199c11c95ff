//! What the command prints: lines and JSON on stdout, one error line on stderr.
//!
//! Every stdout line goes through [`write_line`] (the `outln!` macro): a reader that
//! closed the pipe (`switchyard policy list | head -1`) has what it wanted, so the
//! command ends quietly with status 0 instead of panicking in `println!`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use switchyard::selection::wire::ErrorKind;

/// `println!` for the command's stdout, through [`write_line`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}

/// A failure to report: a stable kind, a message, and the exit code (2 unless said).
pub struct CliError {
    pub kind: ErrorKind,
    pub message: String,
    pub code: u8,
}

impl CliError {
    /// `kind` with `message`, exit code 2.
    pub fn new(kind: impl Into<ErrorKind>, message: impl Into<String>) -> Self {
        Self { kind: kind.into(), message: message.into(), code: 2 }
    }

    /// Prints the error as one line on stderr (scripts read the kind from the first
    /// line) and returns the exit code.
    pub fn report(&self) -> ExitCode {
        let message = self.message.lines().map(str::trim).collect::<Vec<_>>().join("; ");
        eprintln!("error: {}: {message}", self.kind);
        ExitCode::from(self.code)
    }
}

impl From<switchyard::LoadError> for CliError {
    /// A refused component, with the kind `policy check` prints.
    fn from(e: switchyard::LoadError) -> Self {
        Self::new(e.kind, e.message)
    }
}

/// Reads a file the command was given (`io` on failure, naming it).
pub fn read_file(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|e| CliError::new(ErrorKind::Io, format!("reading {}: {e}", path.display())))
}

/// Writes a file the command was asked for (`io` on failure, naming it).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, bytes)
        .map_err(|e| CliError::new(ErrorKind::Io, format!("writing {}: {e}", path.display())))
}

/// Writes one line to stdout. A closed pipe ends the process with status 0: the reader
/// stopped reading, which is not the command's failure; any other write error ends it
/// with status 1 and a message on stderr.
pub fn write_line(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(line).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: io: writing to stdout: {e}");
        std::process::exit(1);
    }
}

/// Sets up the one `tracing` subscriber of every command: structured logs on stderr
/// (stdout carries the answers and the `listening on` line scripts read), filtered by
/// `RUST_LOG`, `info` by default (the service's uploads, assignments, breaker trips and
/// refusals; the host's rejected artifacts).
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: a redirected log (a file, journald) gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}

/// Prints `value` as pretty JSON.
pub fn print_json(value: &serde_json::Value) {
    outln!("{}", serde_json::to_string_pretty(value).expect("a Value always serialises"));
}
