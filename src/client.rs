//! A small blocking client for a running `switchyard serve` (the `policy upload|assign|
//! rollback`, `policy list --tenant` and `tenant add` commands).

use clap::Args;
use serde_json::Value;
use switchyard::selection::wire::{ErrorBody, ErrorKind};

use crate::output::CliError;

/// Where the server is and who we are.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// The service's base URL.
    #[arg(long, env = "SWITCHYARD_SERVER", default_value = "http://127.0.0.1:7700")]
    pub server: String,
    /// A bearer token: the admin's (`<data-dir>/admin.token`) or a tenant's.
    #[arg(long, env = "SWITCHYARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

pub enum Method {
    Get,
    Post,
    Put,
}

impl ServerArgs {
    /// Sends `body` to `path` and returns the JSON answer; an error answer becomes its
    /// `kind` and `message`.
    pub fn call(&self, method: Method, path: &str, body: Option<&[u8]>) -> Result<Value, CliError> {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let url = format!("{}{path}", self.server.trim_end_matches('/'));
        let auth = self.token.as_ref().map(|t| format!("Bearer {}", t.trim()));
        macro_rules! with_auth {
            ($req:expr) => {{
                let req = $req;
                match &auth {
                    Some(a) => req.header("Authorization", a),
                    None => req,
                }
            }};
        }
        let sent = match method {
            Method::Get => with_auth!(agent.get(&url)).call(),
            Method::Post => with_auth!(agent.post(&url)).send(body.unwrap_or_default()),
            Method::Put => with_auth!(agent.put(&url)).send(body.unwrap_or_default()),
        };
        let mut response = sent.map_err(|e| CliError::new(ErrorKind::Connect, format!("{url}: {e}")))?;
        let status = response.status();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| CliError::new(ErrorKind::Connect, format!("reading the answer from {url}: {e}")))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|_| CliError::new(ErrorKind::Server, format!("{status}: {}", text.trim())))?;
        if status.is_success() {
            return Ok(value);
        }
        // The service's error shape; a kind this CLI does not know (a newer server's) is
        // reported as `server`, with the server's own words.
        let Ok(ErrorBody { error }) = serde_json::from_value::<ErrorBody>(value) else {
            return Err(CliError::new(ErrorKind::Server, format!("{status}: {}", text.trim())));
        };
        Err(CliError::new(error.kind, format!("{} (HTTP {})", error.message, status.as_u16())))
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn encode_query(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
