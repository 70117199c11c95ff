//! Worker tables the service holds for routers (`/v1/tenants/{tenant}/tables/{table}`):
//! put whole, changed by versioned deltas, named by selections, which then carry only
//! what the request adds. In memory, per replica: a restart (or another replica) has
//! none, and a selection naming one is refused `unknown-table` until it is put again.
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
use switchyard::selection::wire::{ErrorKind, TableDelta, TableJson, TableState, TableVersion};

use crate::auth::{Principal, require_selector};
use crate::error::ApiError;
use crate::state::Service;

/// Every tenant's held tables.
#[derive(Debug)]
pub struct Tables {
    by_tenant: RwLock<HashMap<String, Arc<TenantTables>>>,
    /// The next version to give: versions are unique across tables, and, started from
    /// the clock in microseconds, across restarts, so a version a router kept from
    /// before a restart (or a delete) never names a table put since.
    next_version: AtomicU64,
}

type TenantTables = Mutex<HashMap<String, Arc<HeldTable>>>;

impl Default for Tables {
    fn default() -> Self {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_micros() as u64);
        Self { by_tenant: RwLock::default(), next_version: AtomicU64::new(now.max(1)) }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn unknown_table(tenant: &str, table: &str) -> ApiError {
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
    fn version(&self) -> u64 {
        self.next_version.fetch_add(1, Ordering::Relaxed)
    }

    fn tenant(&self, tenant: &str) -> Option<Arc<TenantTables>> {
        self.by_tenant.read().unwrap_or_else(|p| p.into_inner()).get(tenant).cloned()
    }

    fn tenant_or_new(&self, tenant: &str) -> Arc<TenantTables> {
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

fn answer(tenant: &str, table: &str, held: &HeldTable) -> TableVersion {
    TableVersion {
        tenant: tenant.to_string(),
        table: table.to_string(),
        version: held.version(),
        workers: held.table().workers().len(),
        slots: held.table().slots().len(),
    }
}

impl Service {
    /// The caller may act for `tenant`'s tables (the tenant, a router, the admin), and
    /// the tenant exists.
    fn table_owner(&self, who: &Principal, tenant: &str) -> Result<(), ApiError> {
        require_selector(who, tenant)?;
        if self.snapshot().route(tenant, None).is_none() {
            return Err(ApiError::not_found(ErrorKind::UnknownTenant, format!("no tenant `{tenant}`")));
        }
        Ok(())
    }

    /// `PUT …/tables/{table}`: the table, whole, as a new version.
    pub fn put_table(
        &self,
        who: &Principal,
        tenant: &str,
        table: &str,
        body: TableJson,
    ) -> Result<TableVersion, ApiError> {
        crate::manage::check_name("table", table)?;
        self.table_owner(who, tenant)?;
        let invalid = |e: switchyard::selection::InputError| {
            ApiError::bad_request(ErrorKind::InvalidInput, e.to_string())
        };
        let held = HeldTable::new(body.workers, body.inputs, self.tables.version(), self.limits.requests())
            .map_err(invalid)?;
        let tables = self.tables.tenant_or_new(tenant);
        let mut tables = lock(&tables);
        let max = self.limits.max_tables_per_tenant;
        if !tables.contains_key(table) && tables.len() >= max {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorKind::TooManyTables,
                format!(
                    "tenant `{tenant}` has {} tables; the limit is {max} (`max_tables_per_tenant`): delete one first",
                    tables.len()
                ),
            ));
        }
        let answer = answer(tenant, table, &held);
        tables.insert(table.to_string(), Arc::new(held));
        Ok(answer)
    }

    /// `POST …/tables/{table}/deltas`: the change, on the version it names only.
    pub fn change_table(
        &self,
        who: &Principal,
        tenant: &str,
        table: &str,
        delta: TableDelta,
    ) -> Result<TableVersion, ApiError> {
        self.table_owner(who, tenant)?;
        let current = self.tables.get(tenant, table)?;
        let base = delta.base_version;
        if base != current.version() {
            return Err(wrong_version(table, base, current.version(), "the delta is based on"));
        }
        let changed = current
            .apply(delta, self.tables.version(), self.limits.requests())
            .map_err(|e| ApiError::bad_request(ErrorKind::InvalidInput, e.to_string()))?;
        let tables = self.tables.tenant_or_new(tenant);
        let mut tables = lock(&tables);
        // Another change of the same version may have landed while this one was built.
        match tables.get(table) {
            Some(now) if now.version() == base => {}
            Some(now) => return Err(wrong_version(table, base, now.version(), "the delta is based on")),
            None => return Err(unknown_table(tenant, table)),
        }
        let answer = answer(tenant, table, &changed);
        tables.insert(table.to_string(), Arc::new(changed));
        Ok(answer)
    }

    /// `GET …/tables/{table}`: the current version, whole.
    pub fn table_state(&self, who: &Principal, tenant: &str, table: &str) -> Result<TableState, ApiError> {
        self.table_owner(who, tenant)?;
        let held = self.tables.get(tenant, table)?;
        Ok(TableState {
            tenant: tenant.to_string(),
            table: table.to_string(),
            version: held.version(),
            workers: held.workers_json(),
            inputs: held.inputs().clone(),
        })
    }

    /// `DELETE …/tables/{table}`.
    pub fn delete_table(
        &self,
        who: &Principal,
        tenant: &str,
        table: &str,
    ) -> Result<serde_json::Value, ApiError> {
        self.table_owner(who, tenant)?;
        let removed = self.tables.tenant(tenant).and_then(|tables| lock(&tables).remove(table));
        match removed {
            Some(_) => Ok(serde_json::json!({ "tenant": tenant, "table": table, "deleted": true })),
            None => Err(unknown_table(tenant, table)),
        }
    }
}
