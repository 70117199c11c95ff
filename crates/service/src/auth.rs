//! Bearer tokens: random, shown once, stored only as sha256 hashes, compared in constant
//! time. Three kinds of principal: the admin, a tenant, a router.

use std::path::Path;

use axum::http::{HeaderMap, StatusCode, header};
use sha2::{Digest, Sha256};
use switchyard::selection::wire::ErrorKind;

use crate::error::ApiError;
use crate::store::Manifest;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The admin token's holder: may create tenants and routers, and act for any tenant.
    Admin,
    /// A tenant, by name: manages its own policies and selects for itself.
    Tenant(String),
    /// A router, by name: may select for any tenant, and manage nothing.
    Router(String),
}

impl Principal {
    /// Who, in a record or a log line: `the admin`, `tenant acme`, `router edge`.
    pub fn describe(&self) -> String {
        match self {
            Principal::Admin => "the admin".into(),
            Principal::Tenant(name) => format!("tenant {name}"),
            Principal::Router(name) => format!("router {name}"),
        }
    }
}

/// A fresh token: 32 random bytes, hex, with a prefix that makes it recognisable in a
/// leaked log.
pub fn new_token() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::internal(format!("no randomness: {e}")))?;
    Ok(format!("sy_{}", hex::encode(bytes)))
}

/// sha256 of a token, hex: what the store keeps.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The admin token's hash: from `SWITCHYARD_ADMIN_TOKEN` if set, else from
/// `<data-dir>/admin.token`, created (mode 0600) with a fresh token on first start. The
/// file is read only if it is a regular file (not a symlink) that only its owner, this
/// process's user, may access.
pub fn admin_token_hash(data_dir: &Path, from_env: Option<String>) -> std::io::Result<String> {
    if let Some(token) = from_env.filter(|t| !t.is_empty()) {
        return Ok(hash_token(&token));
    }
    let path = data_dir.join("admin.token");
    match switchyard_fs::read_private(&path, 4096) {
        Ok(token) => {
            let token = String::from_utf8_lossy(&token);
            if !token.trim().is_empty() {
                return Ok(hash_token(token.trim()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let token = new_token().map_err(|e| std::io::Error::other(e.message().to_string()))?;
    // Owner-only, atomically (a crash leaves no empty file).
    switchyard_fs::write_private(data_dir, "admin.token", format!("{token}\n").as_bytes())?;
    Ok(hash_token(&token))
}

/// Equal hashes, in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    constant_time_eq::constant_time_eq(a.as_bytes(), b.as_bytes())
}

/// Token hash → whose token it is, for every tenant and router (the admin's is kept
/// apart). A persistent map: each snapshot shares it, and adding a tenant copies one path,
/// so finding a caller costs the same with ten tenants or ten thousand.
#[derive(Debug, Clone, Default)]
pub struct Tokens(imbl::HashMap<String, Principal>);

impl Tokens {
    /// The tokens of every tenant and router of `manifest`.
    pub fn of(manifest: &Manifest) -> Self {
        let tenants = manifest
            .tenants
            .iter()
            .map(|(name, t)| (t.token_sha256.clone(), Principal::Tenant(name.clone())));
        let routers =
            manifest.routers.iter().map(|(name, hash)| (hash.clone(), Principal::Router(name.clone())));
        Self(tenants.chain(routers).collect())
    }

    /// Forgets the hash `old` (a record's before a change) and adds `new` (after it).
    pub(crate) fn replace(&mut self, old: Option<&str>, new: Option<(&str, Principal)>) {
        if let Some(old) = old {
            self.0.remove(old);
        }
        if let Some((hash, principal)) = new {
            self.0.insert(hash.to_string(), principal);
        }
    }
}

/// Identifies the caller from `Authorization: Bearer <token>`: 401 without a token or
/// with an unknown one. The admin's hash is compared in constant time; a tenant's or
/// router's is found by the presented token's hash (looking a hash up tells the caller
/// about the hash of its own guess, never about the bytes of a stored one).
pub fn identify(headers: &HeaderMap, admin_sha256: &str, tokens: &Tokens) -> Result<Principal, ApiError> {
    let unauthorized = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, ErrorKind::Unauthorized, m);
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("send `Authorization: Bearer <token>`"))?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <token>`"))?;
    let presented = hash_token(token);
    if same(&presented, admin_sha256) {
        return Ok(Principal::Admin);
    }
    tokens.0.get(&presented).cloned().ok_or_else(|| unauthorized("unknown token"))
}

/// 403 unless the caller is the admin.
pub fn require_admin(who: &Principal) -> Result<(), ApiError> {
    match who {
        Principal::Admin => Ok(()),
        _ => Err(ApiError::new(StatusCode::FORBIDDEN, ErrorKind::Forbidden, "this needs the admin token")),
    }
}

/// 403 unless the caller is `tenant` itself or the admin.
pub fn require_tenant(who: &Principal, tenant: &str) -> Result<(), ApiError> {
    match who {
        Principal::Admin => Ok(()),
        Principal::Tenant(name) if name == tenant => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorKind::Forbidden,
            format!("this token may not act for tenant `{tenant}`"),
        )),
    }
}

/// 403 unless the caller may select for `tenant`: the admin, any router, or the tenant.
pub fn require_selector(who: &Principal, tenant: &str) -> Result<(), ApiError> {
    match who {
        Principal::Router(_) => Ok(()),
        _ => require_tenant(who, tenant),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TenantRecord;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn tokens_identify_their_principal_and_others_are_refused() {
        let admin = hash_token("root");
        let mut manifest = Manifest::default();
        let tenant = TenantRecord { token_sha256: hash_token("t1"), ..Default::default() };
        manifest.tenants.insert("acme".into(), tenant.into());
        manifest.routers.insert("edge".into(), hash_token("r1"));
        let mut tokens = Tokens::of(&manifest);
        let id = |v: &str, tokens: &Tokens| identify(&headers(v), &admin, tokens);
        // A new tenant's token is found, a replaced one is not.
        tokens.replace(None, Some((&hash_token("t9"), Principal::Tenant("globex".into()))));
        assert_eq!(id("Bearer t9", &tokens).unwrap(), Principal::Tenant("globex".into()));
        tokens.replace(Some(&hash_token("t9")), None);
        assert_eq!(id("Bearer t9", &tokens).unwrap_err().status(), StatusCode::UNAUTHORIZED);
        let id = |v: &str| id(v, &tokens);
        assert_eq!(id("Bearer root").unwrap(), Principal::Admin);
        assert_eq!(id("Bearer t1").unwrap(), Principal::Tenant("acme".into()));
        assert_eq!(id("Bearer r1").unwrap(), Principal::Router("edge".into()));
        for bad in ["Bearer t2", "Basic t1", "Bearer ", "t1"] {
            assert_eq!(id(bad).unwrap_err().status(), StatusCode::UNAUTHORIZED, "{bad}");
        }
        assert_eq!(
            identify(&HeaderMap::new(), &admin, &tokens).unwrap_err().status(),
            StatusCode::UNAUTHORIZED
        );
        let acme = Principal::Tenant("acme".into());
        assert!(require_tenant(&acme, "acme").is_ok());
        assert_eq!(require_tenant(&acme, "globex").unwrap_err().status(), StatusCode::FORBIDDEN);
        assert!(require_selector(&Principal::Router("edge".into()), "globex").is_ok());
        assert_eq!(require_admin(&acme).unwrap_err().status(), StatusCode::FORBIDDEN);
        assert!(new_token().unwrap() != new_token().unwrap());
    }
}
