//! The per-tenant write rate limits (`writes_per_minute`, `uploads_per_minute`): one
//! sliding-window implementation behind both, kept per tenant by the service. In a fleet
//! each replica also counts the writes it adopts from the others, so a tenant's
//! allowance is the fleet's, not each replica's.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use switchyard::selection::wire::ErrorKind;

use crate::config::ServiceLimits;
use crate::error::ApiError;

/// The window of the per-minute rate limits.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Times of the events in the last [`RATE_WINDOW`]: a sliding-window rate limit.
#[derive(Debug, Default)]
struct Window(VecDeque<Instant>);

impl Window {
    /// Events still in the window at `now` (older ones are forgotten).
    fn count(&mut self, now: Instant) -> usize {
        while self.0.front().is_some_and(|t| now.duration_since(*t) >= RATE_WINDOW) {
            self.0.pop_front();
        }
        self.0.len()
    }
}

/// One tenant's rate-limit windows.
#[derive(Debug, Default)]
struct TenantRates {
    uploads: Window,
    writes: Window,
}

/// What a write is, for the rate limits: every write counts against `writes_per_minute`,
/// an upload against `uploads_per_minute` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteKind {
    Upload,
    Assign,
    Rollback,
}

/// Every tenant's uploads and writes in the last minute.
#[derive(Debug, Default)]
pub(crate) struct WriteRates(Mutex<HashMap<String, TenantRates>>);

impl WriteRates {
    /// Counts a write against the tenant's per-minute allowances (`writes_per_minute`,
    /// and `uploads_per_minute` for an upload), or refuses it (429 `rate-limited`, naming
    /// the limit) without counting it. Call only for an existing tenant, before the work
    /// the write costs (an upload: before its body is read), so a write that fails
    /// later still counts.
    pub(crate) fn admit(
        &self,
        tenant: &str,
        limits: &ServiceLimits,
        kind: WriteKind,
    ) -> Result<(), ApiError> {
        let mut rates = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let rates = rates.entry(tenant.to_string()).or_default();
        let now = Instant::now();
        rates.room(tenant, limits, kind, now)?;
        rates.record(kind, now);
        Ok(())
    }

    /// Counts a write another replica of the fleet made (adopted from the registry), so
    /// the allowances hold across the fleet, not per replica.
    pub(crate) fn count(&self, tenant: &str, kind: WriteKind) {
        let mut rates = self.0.lock().unwrap_or_else(|p| p.into_inner());
        rates.entry(tenant.to_string()).or_default().record(kind, Instant::now());
    }
}

impl TenantRates {
    /// Counts a write of `kind` at `now`: against the writes, and the uploads if it is one.
    fn record(&mut self, kind: WriteKind, now: Instant) {
        if kind == WriteKind::Upload {
            self.uploads.0.push_back(now);
        }
        self.writes.0.push_back(now);
    }

    /// Whether the allowances have room for one more write of `kind` at `now` (429
    /// `rate-limited` naming the limit if not).
    fn room(
        &mut self,
        tenant: &str,
        limits: &ServiceLimits,
        kind: WriteKind,
        now: Instant,
    ) -> Result<(), ApiError> {
        let refuse = |what: &str, n: usize, limit: usize, name: &str| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorKind::RateLimited,
                format!(
                    "tenant `{tenant}` made {n} {what} in the last minute; the limit is {limit} (`{name}`)"
                ),
            )
        };
        let writes = self.writes.count(now);
        if writes >= limits.writes_per_minute {
            return Err(refuse("writes", writes, limits.writes_per_minute, "writes_per_minute"));
        }
        if kind == WriteKind::Upload {
            let uploads = self.uploads.count(now);
            if uploads >= limits.uploads_per_minute {
                return Err(refuse("uploads", uploads, limits.uploads_per_minute, "uploads_per_minute"));
            }
        }
        Ok(())
    }
}
