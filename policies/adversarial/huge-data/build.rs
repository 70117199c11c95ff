//! Writes the 5 MiB table the guest embeds (xorshift bytes: deterministic, incompressible).

fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let bytes: Vec<u8> = (0..5 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8 | 1
        })
        .collect();
    std::fs::write(out.join("table.bin"), bytes).expect("writing the table");
    println!("cargo:rerun-if-changed=build.rs");
}
