//! Worker tables the service holds for routers (`/v1/tenants/{tenant}/tables/{table}`,
//! whose handlers are in `manage`): put whole, changed by versioned deltas, named by
//! selections, which then carry only what the request adds. In memory, per replica: a
//! restart (or another replica) has none, and a selection naming one is refused
//! `unknown-table` until it is put again.
//!
//! Each tenant's tables sit behind a lock of their own, taken only to swap or read a
//! table's `Arc`: a delta is built outside it, so one tenant's large changes never hold
//! another's selections, nor its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use switchyard::selection::HeldTable;
use switchyard::selection::wire::ErrorKind;

use crate::error::ApiError;

/// Every tenant's held tables.
#[derive(Debug)]
pub struct Tables {
    by_tenant: RwLock<HashMap<String, Arc<TenantTables>>>,
    /// The next version to give: versions are unique across tables, and, started from
    /// the clock in microseconds, across restarts, so a version a router kept from
    /// before a restart (or a delete) never names a table put since.
    next_version: AtomicU64,
}

pub(crate) type TenantTables = Mutex<HashMap<String, Arc<HeldTable>>>;

impl Default for Tables {
    fn default() -> Self {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_micros() as u64);
        Self { by_tenant: RwLock::default(), next_version: AtomicU64::new(now.max(1)) }
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn unknown_table(tenant: &str, table: &str) -> ApiError {
    ApiError::not_found(
        ErrorKind::UnknownTable,
        format!(
            "tenant `{tenant}` has no table `{table}` on this replica (put it: PUT /v1/tenants/{tenant}/tables/{table})"
        ),
    )
}

/// A version other than the table's current one, named.
pub(crate) fn wrong_version(table: &str, given: u64, current: u64, what: &str) -> ApiError {
    let why = if given < current {
        "an older one: changes since were applied"
    } else {
        "no version this table has had"
    };
    ApiError::new(
        StatusCode::CONFLICT,
        ErrorKind::TableVersion,
        format!(
            "{what} version {given} of table `{table}`, which is at version {current} ({given} is {why}); \
             read it again (GET) or put it whole"
        ),
    )
}

impl Tables {
    pub(crate) fn version(&self) -> u64 {
        self.next_version.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn tenant(&self, tenant: &str) -> Option<Arc<TenantTables>> {
        self.by_tenant.read().unwrap_or_else(|p| p.into_inner()).get(tenant).cloned()
    }

    pub(crate) fn tenant_or_new(&self, tenant: &str) -> Arc<TenantTables> {
        if let Some(tables) = self.tenant(tenant) {
            return tables;
        }
        let mut by_tenant = self.by_tenant.write().unwrap_or_else(|p| p.into_inner());
        Arc::clone(by_tenant.entry(tenant.to_string()).or_default())
    }

    /// `tenant`'s table `table`, current version.
    pub fn get(&self, tenant: &str, table: &str) -> Result<Arc<HeldTable>, ApiError> {
        self.tenant(tenant)
            .and_then(|tables| lock(&tables).get(table).cloned())
            .ok_or_else(|| unknown_table(tenant, table))
    }

    /// How many tables `tenant` has.
    pub fn count(&self, tenant: &str) -> usize {
        self.tenant(tenant).map_or(0, |tables| lock(&tables).len())
    }
}
