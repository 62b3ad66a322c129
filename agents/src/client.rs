//! A gRPC client for an agent on a Unix socket: what the kernel does, for
//! tests and tools.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::policy_agent_client::PolicyAgentClient;

/// Connects to the agent listening on the Unix socket `path`.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use policy_agents::{client, proto};
/// let mut agent = client::connect_unix("/run/agents/auth.sock").await?;
/// let config = agent.get_agent_config(proto::GetAgentConfigRequest {}).await?;
/// println!("{:?}", config.into_inner().supported_policies);
/// # Ok(()) }
/// ```
pub async fn connect_unix(path: impl AsRef<Path>) -> Result<PolicyAgentClient<Channel>, tonic::transport::Error> {
    Ok(PolicyAgentClient::new(channel_unix(path).await?))
}

/// A tonic [`Channel`] to the Unix socket `path` (the URI is a placeholder).
pub async fn channel_unix(path: impl AsRef<Path>) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.as_ref().to_path_buf();
    Endpoint::from_static("http://policy-agent.local")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}
