//! The timed rounds' HTTP client: one keep-alive connection, each request's bytes built
//! before the clock starts, the answer read by its `Content-Length` and left as bytes.
//!
//! Why not the tests' `Client` (ureq): it parses the URL, builds the headers, serialises
//! the JSON body and parses the answer into a JSON tree on every request, on the same two
//! cores the server runs on, so the latencies would be partly the client's own
//! (docs/benchmarks-history.md, "the bench's own client was the tail"). This one costs a
//! `write` and a `read` or two.

use std::io::{Read, Write};
use std::net::TcpStream;

/// One connection to the server.
pub struct Connection {
    stream: TcpStream,
    /// The last answer (head and body).
    buffer: Vec<u8>,
}

impl Connection {
    /// Connects to `addr` (`127.0.0.1:<port>`).
    pub fn open(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
        stream.set_nodelay(true).expect("TCP_NODELAY");
        Self { stream, buffer: Vec::with_capacity(16 << 10) }
    }

    /// Sends `request` (from [`request`]) and reads its answer: (status, body). Panics on
    /// a transport failure or an answer it cannot frame (no `Content-Length`).
    pub fn exchange(&mut self, request: &[u8]) -> (u16, &[u8]) {
        self.stream.write_all(request).expect("sending a request");
        self.buffer.clear();
        let head_end = loop {
            self.fill();
            if let Some(at) = find(&self.buffer, b"\r\n\r\n") {
                break at + 4;
            }
        };
        let head = std::str::from_utf8(&self.buffer[..head_end]).expect("an answer's head is text");
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in `{head}`"));
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("no Content-Length in `{head}`"));
        while self.buffer.len() < head_end + length {
            self.fill();
        }
        (status, &self.buffer[head_end..head_end + length])
    }

    /// Reads what the server has sent so far onto the buffer; panics at end of stream.
    fn fill(&mut self) {
        let mut chunk = [0u8; 16 << 10];
        let n = self.stream.read(&mut chunk).expect("reading an answer");
        assert!(n > 0, "the server closed the connection mid-answer");
        self.buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The bytes of an HTTP/1.1 request (keep-alive), with a bearer `token` and a JSON `body`
/// if given.
pub fn request(method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Vec<u8> {
    encoded_request(method, path, token, body.map(|b| ("application/json", b.as_bytes())))
}

/// [`request`] with a body of any media type: `(Content-Type, bytes)`.
#[allow(dead_code, reason = "a module of several benches; the scale bench sends JSON only")]
pub fn encoded_request(
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<(&str, &[u8])>,
) -> Vec<u8> {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let content = body.map_or(String::new(), |(media, b)| {
        format!("Content-Type: {media}\r\nContent-Length: {}\r\n", b.len())
    });
    let mut bytes =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{content}\r\n").into_bytes();
    bytes.extend_from_slice(body.map_or(&[][..], |(_, b)| b));
    bytes
}

/// Where `needle` first occurs in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
