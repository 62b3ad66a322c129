//! Compiles `../proto/policy_agent.proto` with protox (pure Rust, no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../proto/policy_agent.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["../proto"])?;
    // Agent calls decode from one contiguous buffer: see policy_net::codec.
    tonic_prost_build::configure()
        .bytes(".")
        // A call's policies stay encoded until the agent looks them up
        // among those it has decoded: see src/call_policy.rs.
        .extern_path(".policy_kernel.agent.v1.Policy", "crate::call_policy::Policy")
        // A call's HTTP strings share the call's buffer: src/call_data.rs.
        .extern_path(".policy_kernel.agent.v1.HeaderValue", "crate::call_data::HeaderValue")
        .extern_path(".policy_kernel.agent.v1.RequestData", "crate::call_data::RequestData")
        .codec_path("policy_net::codec::ContiguousCodec")
        .compile_fds(fds)?;
    Ok(())
}
