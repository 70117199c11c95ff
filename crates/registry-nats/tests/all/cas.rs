//! Every change is a compare-and-set on the key's revision: of two replicas writing one
//! tenant against the same revision, one wins and the other gets a conflict; no update
//! is lost.

use switchyard_registry_nats::{Expected, Key, RegistryError};
use switchyard_store::TenantRecord;

use crate::server::{registry, start};

fn tenant(token: &str) -> TenantRecord {
    TenantRecord { token_sha256: token.into(), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_writes_to_one_tenant_lose_no_update() {
    let server = start("cas");
    let (a, b) = (registry(&server).await, registry(&server).await);
    a.put_tenant("acme", &tenant("t0"), Expected::Absent).await.expect("created");
    let again = b.put_tenant("acme", &tenant("t1"), Expected::Absent).await;
    assert!(matches!(again, Err(RegistryError::Conflict { .. })), "{again:?}");

    // Both replicas read revision `first` and write against it at once: exactly one wins.
    for round in 0..20 {
        let loaded = a.load().await.unwrap();
        let revision = loaded.revisions["tenant.acme"];
        let (ta, tb) = (tenant(&format!("a{round}")), tenant(&format!("b{round}")));
        let (ra, rb) = tokio::join!(
            a.put_tenant("acme", &ta, Expected::Revision(revision)),
            b.put_tenant("acme", &tb, Expected::Revision(revision)),
        );
        let won: Vec<_> = [&ra, &rb].into_iter().filter(|r| r.is_ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {ra:?} / {rb:?}");
        let lost = if ra.is_ok() { &rb } else { &ra };
        assert!(matches!(lost, Err(RegistryError::Conflict { .. })), "round {round}: {lost:?}");
        // What is stored is the winner's, whole.
        let now = a.load().await.unwrap();
        let token = &now.manifest.tenants["acme"].token_sha256;
        let winner = if ra.is_ok() { format!("a{round}") } else { format!("b{round}") };
        assert_eq!(token, &winner, "round {round}");
    }

    // A removal against a stale revision is a conflict too; against the current one, done.
    let loaded = a.load().await.unwrap();
    let revision = loaded.revisions["tenant.acme"];
    let stale = b.remove(&Key::Tenant("acme".into()), revision - 1).await;
    assert!(matches!(stale, Err(RegistryError::Conflict { .. })), "{stale:?}");
    b.remove(&Key::Tenant("acme".into()), revision).await.expect("removed");
    assert!(a.load().await.unwrap().manifest.tenants.is_empty());
    // And the name can be created again.
    a.put_tenant("acme", &tenant("t2"), Expected::Absent).await.expect("created again");
}

#[tokio::test(flavor = "multi_thread")]
async fn routers_and_tenants_load_back_as_a_manifest() {
    let server = start("load");
    let registry = registry(&server).await;
    registry.put_tenant("acme", &tenant("aa"), Expected::Absent).await.unwrap();
    registry.put_tenant("globex", &tenant("bb"), Expected::Absent).await.unwrap();
    let r = registry.put_router("edge", "cc", Expected::Absent).await.unwrap();
    let loaded = registry.load().await.unwrap();
    assert_eq!(loaded.manifest.tenants.keys().collect::<Vec<_>>(), ["acme", "globex"]);
    assert_eq!(loaded.manifest.routers["edge"], "cc");
    assert_eq!(loaded.revisions["router.edge"], r);
    assert_eq!(loaded.last_revision, r);
}
