//! A fleet: replicas of the real `switchyard serve --registry nats://…` on one real
//! nats-server, and what its tests and bench wait for.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::DEFAULT_POLICY;
use crate::nats::NatsServer;
use serde_json::{Value, json};

use crate::server::{ADMIN, Client, Server, serve_command, temp_dir, write_config};

/// A replica on `nats` with its own data dir (admin token, compiled cache), its log
/// in `<dir>/<name>.log`.
pub fn replica(dir: &Path, name: &str, nats_url: &str) -> Server {
    replica_with(dir, name, nats_url, None)
}

/// [`replica`] with `config` as its config file.
pub fn replica_with(dir: &Path, name: &str, nats_url: &str, config: Option<&Path>) -> Server {
    let mut command = serve_command(&dir.join(name), config, Some(ADMIN));
    command.args(["--registry", nats_url]);
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("creating a log file");
    Server::spawn(command, log)
}

/// A nats-server and three replicas of `switchyard serve` on it.
pub struct Fleet {
    /// The replicas' data dirs, logs and config.
    pub dir: PathBuf,
    /// The nats-server they share.
    pub nats: NatsServer,
    /// A, B and C.
    pub replicas: [Server; 3],
}

impl Fleet {
    /// A fleet for the test `name`.
    pub fn start(name: &str) -> Self {
        Self::start_with(name, None)
    }

    /// A fleet for `name` whose replicas all run with `config` (a `switchyard.toml`).
    pub fn start_with(name: &str, config: Option<&str>) -> Self {
        let dir = temp_dir(name);
        let nats = NatsServer::start(&crate::target_tmp_dir(), name);
        let config = config.map(|text| write_config(&dir, text));
        let replicas = ["a", "b", "c"]
            .map(|replica_name| replica_with(&dir, replica_name, &nats.url(), config.as_deref()));
        Self { dir, nats, replicas }
    }

    /// A client of each replica.
    pub fn clients(&self) -> [Client; 3] {
        [0, 1, 2].map(|i| Client::new(&self.replicas[i]))
    }
}

/// Waits until `client` answers a selection for acme's `class` with `version`.
pub fn wait_for_version(client: &Client, token: &str, class: &str, version: &str, replica: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, v) = client.select(token, "acme", Some(class));
        if status == 200 && v["version"] == version {
            return;
        }
        assert!(Instant::now() < deadline, "replica {replica}: never answered {version}: {status} {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Creates tenant acme through `client`, uploads the default policy as its `mine` and
/// routes `class` to it: (acme's token, the version).
pub fn acme_with_mine(client: &Client, class: &str) -> (String, String) {
    let token = client.add_tenant("acme");
    let version = client.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    client.assigned(&token, "acme", class, json!({ "policy": "mine" }));
    (token, version)
}

/// The `error.kind` of an error answer ("" for any other).
pub fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or_default()
}
