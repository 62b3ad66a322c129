//! `auth-agent`: `apiKeyAuth`, `jwtValidation`, `tokenIntrospection`,
//! `oauthProtectedResource` and `roleCheck`.

use std::process::ExitCode;

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    reference_agents::program::auth::main(std::env::args_os().collect())
}
