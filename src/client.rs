//! A small blocking client for a running `switchyard serve` (the `policy upload|assign|
//! rollback`, `policy list --tenant` and `tenant add` commands).

use clap::Args;
use serde_json::Value;
use switchyard::selection::wire::{ErrorBody, ErrorKind};

use crate::output::CliError;

/// Where the server is and who we are.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// The service's base URL, `http://HOST:PORT`; `HOST:PORT` alone means `http://HOST:PORT`.
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
    Delete,
}

impl ServerArgs {
    /// The server's base URL, without a trailing `/`. A URL with no scheme is taken as
    /// http's (`localhost:7700`, as `switchyard serve` is told to `--listen`); any other
    /// scheme is refused, naming where the URL came from.
    fn base_url(&self) -> Result<String, CliError> {
        let given = self.server.trim();
        let url = if given.contains("://") { given.to_string() } else { format!("http://{given}") };
        let refuse = |why: String| {
            // clap reads the environment only when the flag is absent; the same text in
            // both is one URL, whichever it came from.
            let from_env = std::env::var_os("SWITCHYARD_SERVER").is_some_and(|v| v == self.server.as_str());
            let source = if from_env { "SWITCHYARD_SERVER" } else { "--server" };
            CliError::new(
                ErrorKind::Config,
                format!("{source} `{given}`: {why}; the server's URL is http://HOST:PORT"),
            )
        };
        let uri: ureq::http::Uri = url.parse().map_err(|e| refuse(format!("not a URL ({e})")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(refuse("this client speaks plain HTTP only, not https".into())),
            scheme => return Err(refuse(format!("the scheme `{}` is not http", scheme.unwrap_or_default()))),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(refuse("no host".into()));
        }
        Ok(url.trim_end_matches('/').to_string())
    }

    /// Sends `body` to `path` and returns the JSON answer; an error answer becomes its
    /// `kind` and `message`.
    pub fn call(&self, method: Method, path: &str, body: Option<&[u8]>) -> Result<Value, CliError> {
        let (status, text) = self.exchange(method, path, body)?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|_| CliError::new(ErrorKind::Server, format!("{status}: {}", text.trim())))?;
        if status.is_success() { Ok(value) } else { Err(self.refusal(status, &text)) }
    }

    /// `GET path`'s answer as text (a captured trace's JSON Lines, say); an error answer
    /// becomes its `kind` and `message`.
    pub fn get_text(&self, path: &str) -> Result<String, CliError> {
        let (status, text) = self.exchange(Method::Get, path, None)?;
        if status.is_success() { Ok(text) } else { Err(self.refusal(status, &text)) }
    }

    /// Sends the request: the answer's status and body.
    fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(ureq::http::StatusCode, String), CliError> {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let url = format!("{}{path}", self.base_url()?);
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
            Method::Delete => with_auth!(agent.delete(&url)).call(),
            Method::Post => with_auth!(agent.post(&url)).send(body.unwrap_or_default()),
            Method::Put => with_auth!(agent.put(&url)).send(body.unwrap_or_default()),
        };
        let mut response = sent.map_err(|e| CliError::new(ErrorKind::Connect, format!("{url}: {e}")))?;
        let status = response.status();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| CliError::new(ErrorKind::Connect, format!("reading the answer from {url}: {e}")))?;
        Ok((status, text))
    }

    /// The error an answer of `status` with body `text` is.
    fn refusal(&self, status: ureq::http::StatusCode, text: &str) -> CliError {
        // The service's error shape; a kind this CLI does not know (a newer server's) is
        // reported as `server`, with the server's own words.
        let Ok(ErrorBody { error }) = serde_json::from_str::<ErrorBody>(text) else {
            return CliError::new(ErrorKind::Server, format!("{status}: {}", text.trim()));
        };
        // The server names its header; a CLI user sets the token with a flag or variable.
        let hint = match (error.kind, &self.token) {
            (ErrorKind::Unauthorized, None) => {
                "; no token was given: pass --token or set SWITCHYARD_TOKEN (the admin's is <data-dir>/admin.token)"
            }
            (ErrorKind::Unauthorized, Some(_)) => {
                "; the token given (--token or SWITCHYARD_TOKEN) was refused"
            }
            _ => "",
        };
        CliError::new(error.kind, format!("{} (HTTP {}){hint}", error.message, status.as_u16()))
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
