//! A real `switchyard serve` on a loopback port, and a small blocking HTTP client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::variant;
use serde_json::Value;

/// The `switchyard` binary under test: `SWITCHYARD_BIN` when set, else the one cargo
/// built beside the running test or bench (`target/<profile>/switchyard`; cargo builds a
/// package's binaries before its integration tests and benches).
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SWITCHYARD_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/switchyard
    let profile_dir =
        exe.parent().and_then(Path::parent).expect("a test binary lives in target/<profile>/deps");
    profile_dir.join(format!("switchyard{}", std::env::consts::EXE_SUFFIX))
}

/// The admin token the test servers run with (set through `SWITCHYARD_ADMIN_TOKEN`).
pub const ADMIN: &str = "test-admin-token";

/// A fresh, empty directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a temp dir");
    dir
}

/// Writes `text` as `<dir>/switchyard.toml`; its path.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("switchyard.toml");
    std::fs::write(&path, text).expect("writing switchyard.toml");
    path
}

/// `switchyard serve --listen 127.0.0.1:0 --data-dir <data_dir> [--config <config>]`, with
/// `SWITCHYARD_ADMIN_TOKEN` set to `admin_token` (or unset). Start it with
/// [`Server::spawn`], or expect it to refuse with [`serve_refused`].
pub fn serve_command(data_dir: &Path, config: Option<&Path>, admin_token: Option<&str>) -> Command {
    let mut command = Command::new(binary());
    command.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data_dir);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    match admin_token {
        Some(token) => command.env("SWITCHYARD_ADMIN_TOKEN", token),
        None => command.env_remove("SWITCHYARD_ADMIN_TOKEN"),
    };
    command
}

/// Runs `command` (a [`serve_command`]) expecting `switchyard serve` to refuse to start:
/// (its exit code, its stderr). If it starts listening instead, it is killed and the test
/// fails, instead of waiting forever for a server that does not exit.
pub fn serve_refused(mut command: Command) -> (Option<i32>, String) {
    let mut child =
        command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("starting switchyard serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("reading stdout");
    if line.starts_with("listening on") {
        let _ = child.kill();
        let _ = child.wait();
        panic!("switchyard serve started instead of refusing: {line}");
    }
    let out = child.wait_with_output().expect("waiting for switchyard serve");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A running server process; killed when dropped (also when an assertion fails).
pub struct Server {
    child: Child,
    url: String,
}

impl Server {
    /// Starts `switchyard serve --listen 127.0.0.1:0` on `data_dir` and reads the bound
    /// address from its first line of stdout.
    pub fn start(data_dir: &Path, config: Option<&Path>, admin_token: Option<&str>) -> Self {
        Self::spawn(serve_command(data_dir, config, admin_token), Stdio::null())
    }

    /// A server with `config` as its config file (`<dir>/switchyard.toml`), its data dir
    /// `<dir>/data`, and [`ADMIN`] as the admin token.
    pub fn with_config(dir: &Path, config: &str) -> Self {
        let path = write_config(dir, config);
        Self::start(&dir.join("data"), Some(&path), Some(ADMIN))
    }

    /// Starts `command` (a [`serve_command`], perhaps with more environment) with its
    /// stderr going to `stderr` (e.g. a log file), and reads the bound address from its
    /// first line of stdout.
    pub fn spawn(mut command: Command, stderr: impl Into<Stdio>) -> Self {
        let mut child =
            command.stdout(Stdio::piped()).stderr(stderr).spawn().expect("starting switchyard serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("reading stdout");
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not start: {line:?}");
        };
        Self { url: url.to_string(), child }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `127.0.0.1:<port>`, for a raw TCP connection.
    pub fn addr(&self) -> String {
        self.url.strip_prefix("http://").expect("an http:// URL").to_string()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asserts the process is still running.
    pub fn assert_alive(&mut self) {
        assert!(self.child.try_wait().expect("checking the server process").is_none(), "the server exited");
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A keep-alive HTTP client that returns every status as a value.
pub struct Client {
    agent: ureq::Agent,
    base: String,
}

/// A request's body.
pub enum Body<'a> {
    /// None.
    None,
    /// JSON.
    Json(Value),
    /// Raw bytes (an upload).
    Bytes(&'a [u8]),
}

impl Client {
    /// A client of `server`.
    pub fn new(server: &Server) -> Self {
        Self::at(server.url())
    }

    /// A client of the server at `base` (`http://host:port`).
    pub fn at(base: &str) -> Self {
        // A server that stops answering fails the test (after 2 minutes) instead of
        // hanging it.
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        Self { agent, base: base.to_string() }
    }

    /// Sends a request; `Err` only for a transport failure. The answer is
    /// (status, JSON body, or `Value::String` of the text if it is not JSON).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Body<'_>,
    ) -> Result<(u16, Value), String> {
        let url = format!("{}{path}", self.base);
        let auth = token.map(|t| format!("Bearer {t}"));
        let bytes: Vec<u8> = match &body {
            Body::None => Vec::new(),
            Body::Json(v) => v.to_string().into_bytes(),
            Body::Bytes(b) => b.to_vec(),
        };
        let response = match method {
            "GET" | "DELETE" => {
                let mut r = if method == "GET" { self.agent.get(&url) } else { self.agent.delete(&url) };
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            "POST" | "PUT" => {
                let mut r = if method == "POST" { self.agent.post(&url) } else { self.agent.put(&url) };
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send(&bytes[..])
            }
            _ => unreachable!("no such method in these tests"),
        };
        let mut response = response.map_err(|e| format!("{method} {url}: {e}"))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .map_err(|e| format!("{method} {url}: {e}"))?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }

    /// POSTs or PUTs `body` as `content_type`, asking for `accept`: (status, the answer's
    /// `Content-Type`, its bytes). Panics on a transport failure.
    pub fn exchange(
        &self,
        method: &str,
        path: &str,
        token: &str,
        (content_type, accept): (&str, &str),
        body: &[u8],
    ) -> (u16, String, Vec<u8>) {
        let url = format!("{}{path}", self.base);
        let request = if method == "PUT" { self.agent.put(&url) } else { self.agent.post(&url) };
        let mut response = request
            .header("Authorization", &format!("Bearer {token}"))
            .header("Content-Type", content_type)
            .header("Accept", accept)
            .send(body)
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let media = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let bytes = response.body_mut().read_to_vec().unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        (response.status().as_u16(), media, bytes)
    }

    /// [`Client::send`] for tests that expect the transport to work.
    pub fn call(&self, method: &str, path: &str, token: Option<&str>, body: Body<'_>) -> (u16, Value) {
        self.send(method, path, token, body).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The text of `/metrics`, scraped with the admin token (asserting it is answered 200).
    pub fn metrics(&self) -> String {
        let (status, text) = self.call("GET", "/metrics", Some(ADMIN), Body::None);
        assert_eq!(status, 200, "{text}");
        text.as_str().expect("metrics are text").to_string()
    }

    /// The value of the sample line `name{labels}` in `/metrics`, if it is there.
    pub fn try_metric(&self, series: &str) -> Option<f64> {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|n| n.parse().ok())
    }

    /// The value of the sample line `name{labels}` in `/metrics`.
    pub fn metric(&self, series: &str) -> f64 {
        self.try_metric(series).unwrap_or_else(|| panic!("no `{series}` as a number in\n{}", self.metrics()))
    }

    /// Polls `series` in /metrics until it reads `value` (at most 5 s); whether it did.
    pub fn wait_for_metric(&self, series: &str, value: f64) -> bool {
        self.wait_for_metric_within(series, value, Duration::from_secs(5))
    }

    /// [`Client::wait_for_metric`], at most `within`.
    pub fn wait_for_metric_within(&self, series: &str, value: f64, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.try_metric(series) == Some(value) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Creates a tenant (as the admin) and returns its token.
    pub fn add_tenant(&self, name: &str) -> String {
        let (status, v) =
            self.call("POST", "/v1/tenants", Some(ADMIN), Body::Json(serde_json::json!({ "name": name })));
        assert_eq!(status, 201, "{v}");
        v["token"].as_str().expect("a token").to_string()
    }

    /// Uploads `bytes` as `tenant`'s policy `name`, with `params` (URL-encoded JSON) as
    /// its parameters; returns (status, answer).
    pub fn upload(
        &self,
        token: &str,
        tenant: &str,
        name: &str,
        bytes: &[u8],
        params: Option<&str>,
    ) -> (u16, Value) {
        let query = params.map(|p| format!("?params={p}")).unwrap_or_default();
        let path = format!("/v1/tenants/{tenant}/policies/{name}{query}");
        self.call("PUT", &path, Some(token), Body::Bytes(bytes))
    }

    /// [`Client::upload`], asserting it is answered 201; the new version.
    pub fn uploaded(
        &self,
        token: &str,
        tenant: &str,
        name: &str,
        bytes: &[u8],
        params: Option<&str>,
    ) -> String {
        let (status, v) = self.upload(token, tenant, name, bytes, params);
        assert_eq!(status, 201, "{v}");
        v["version"].as_str().expect("a version").to_string()
    }

    /// Assigns `tenant`'s `class` (`body`: policy, version, on_fault); (status, answer).
    pub fn assign(&self, token: &str, tenant: &str, class: &str, body: Value) -> (u16, Value) {
        self.call("PUT", &format!("/v1/tenants/{tenant}/classes/{class}"), Some(token), Body::Json(body))
    }

    /// [`Client::assign`], asserting it is answered 200; the answer.
    pub fn assigned(&self, token: &str, tenant: &str, class: &str, body: Value) -> Value {
        let (status, v) = self.assign(token, tenant, class, body);
        assert_eq!(status, 200, "{v}");
        v
    }

    /// `POST /v1/select` of the sample request for `tenant` and `class`; (status, answer).
    pub fn select(&self, token: &str, tenant: &str, class: Option<&str>) -> (u16, Value) {
        self.call("POST", "/v1/select", Some(token), Body::Json(select_body(tenant, class)))
    }
}

/// The sample request as the service takes it: plus tenant and class.
pub fn select_body(tenant: &str, class: Option<&str>) -> Value {
    let mut v: Value =
        serde_json::from_str(switchyard::selection::wire::SAMPLE_REQUEST).expect("the sample parses");
    v["tenant"] = Value::from(tenant);
    v["policy_class"] = class.map_or(Value::Null, Value::from);
    v
}

// Raw HTTP, for requests a client library would not send (stalled bodies, lying
// lengths).

/// Opens a connection and sends a request's head (and the start of its body).
pub fn send_head(addr: &str, head: &str, body_start: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connecting");
    stream.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body_start).unwrap();
    stream
}

/// The head of a raw HTTP/1.1 request (with a bearer `token`, if any).
pub fn head(method: &str, path: &str, token: Option<&str>, content_length: usize) -> String {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Length: {content_length}\r\n\r\n")
}

/// Reads one response (status and body) from `stream`, within `within`.
pub fn read_response(stream: &mut TcpStream, within: Duration) -> Result<(u16, String), String> {
    let deadline = Instant::now() + within;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no complete answer within {within:?}: {:?}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if bytes.is_empty() => return Err(format!("reading the answer: {e}")),
            Err(_) => break,
        }
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if bytes.len() >= end + 4 + length {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes).to_string();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}
