//! A replica loads the registry, then follows every change after what it loaded: made
//! by another replica, and across a restart of the server (file storage keeps both).

use std::time::Duration;

use futures_util::StreamExt;
use switchyard_registry_nats::{Change, Event, Expected, Key, Value};
use switchyard_store::TenantRecord;

use crate::server::{registry, start};

fn tenant(token: &str) -> TenantRecord {
    TenantRecord { token_sha256: token.into(), ..Default::default() }
}

/// The next event of `events`.
pub async fn next_event(
    events: &mut (
             impl futures_util::Stream<Item = Result<Event, switchyard_registry_nats::RegistryError>> + Unpin
         ),
) -> Event {
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event within 10 s")
        .expect("the watch goes on")
        .expect("no error from the server")
}

async fn next(
    events: &mut (
             impl futures_util::Stream<Item = Result<Event, switchyard_registry_nats::RegistryError>> + Unpin
         ),
) -> Change {
    match next_event(events).await {
        Event::Change(change) => change,
        other => panic!("not a readable change: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_follows_changes_made_by_another() {
    let server = start("watch");
    let (a, b) = (registry(&server).await, registry(&server).await);
    a.put_tenant("acme", &tenant("t0"), Expected::Absent).await.unwrap();
    let loaded = b.load().await.unwrap();
    let mut changes = Box::pin(b.watch(loaded.last_revision).await.unwrap());

    let r1 = a
        .put_tenant("acme", &tenant("t1"), Expected::Revision(loaded.revisions["tenant.acme"]))
        .await
        .unwrap();
    let change = next(&mut changes).await;
    assert_eq!((change.key.clone(), change.revision), (Key::Tenant("acme".into()), r1));
    assert_eq!(change.value, Some(Value::Tenant(tenant("t1"))));

    a.put_router("edge", "cc", Expected::Absent).await.unwrap();
    assert_eq!(next(&mut changes).await.value, Some(Value::Router("cc".into())));
    a.remove(&Key::Tenant("acme".into()), r1).await.unwrap();
    let removed = next(&mut changes).await;
    assert_eq!((removed.key, removed.value), (Key::Tenant("acme".into()), None));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_registry_survives_a_server_restart() {
    let mut server = start("restart");
    let client = registry(&server).await;
    client.put_tenant("acme", &tenant("t0"), Expected::Absent).await.unwrap();
    let bytes = b"component bytes".to_vec();
    let name = switchyard_registry_nats::blobs::sha256(&bytes);
    client.put_blob(&name, &bytes).await.unwrap();
    server.restart();
    let client = registry(&server).await;
    let loaded = client.load().await.unwrap();
    assert_eq!(loaded.manifest.tenants["acme"].token_sha256, "t0");
    assert_eq!(client.read_blob(&name).await.unwrap(), bytes);
}
