//! Compiles `proto/fusebox/v1/*.proto` into Rust without a system `protoc`.
//!
//! protox parses the files in pure Rust into a `FileDescriptorSet`; that set
//! is written to `OUT_DIR` (for gRPC reflection) and handed to
//! tonic-prost-build, which generates the messages, clients and servers.

use std::error::Error;
use std::path::PathBuf;

/// Proto files of the API, one per service plus the shared messages.
const PROTO_FILES: &[&str] = &[
    "fusebox/v1/common.proto",
    "fusebox/v1/breakers.proto",
    "fusebox/v1/ledger.proto",
    "fusebox/v1/policy.proto",
    "fusebox/v1/tools.proto",
    "fusebox/v1/cluster.proto",
    "fusebox/v1/auth.proto",
    "fusebox/v1/raft.proto",
];

/// Name of the encoded descriptor set in `OUT_DIR`, read by `lib.rs`.
const DESCRIPTOR_FILE: &str = "fusebox_descriptor.bin";

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    println!("cargo:rerun-if-changed={}", proto_root.display());
    println!("cargo:rerun-if-changed=build.rs");

    let mut compiler = protox::Compiler::new([&proto_root])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(PROTO_FILES)?;

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join(DESCRIPTOR_FILE),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .emit_rerun_if_changed(false)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
