//! Generates the prost messages from `proto/switchyard/v1/select.proto` (the contract,
//! the one source of truth) with protox, a protobuf compiler in Rust: building needs no
//! `protoc`. The descriptor set is written beside them, for the tests that check the
//! contract against the Rust types.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("switchyard/v1/select.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("select.descriptor.bin"), prost::Message::encode_to_vec(&descriptors))?;
    prost_build::Config::new()
        // The JSON's `preferred_taints` is a BTreeMap: decoded straight into one, no rehash.
        .btree_map(["."])
        .compile_fds(descriptors)?;
    Ok(())
}
