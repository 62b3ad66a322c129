//! Compiles `../proto/policy_agent.proto` with protox (pure Rust, no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../proto/policy_agent.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["../proto"])?;
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
