//! Where the load goes: a Unix socket (as Envoy's `pipe` address) or a TCP
//! address, and one HTTP/2 connection (a tonic `Channel`) to it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use tonic::transport::{Channel, Endpoint};

/// A target ext_proc server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `unix:/path` or any value starting with `/` or `.`.
    Unix(PathBuf),
    /// `host:port`.
    Tcp(SocketAddr),
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Target::Unix(PathBuf::from(p)));
        }
        if s.starts_with('/') || s.starts_with('.') {
            return Ok(Target::Unix(PathBuf::from(s)));
        }
        s.parse()
            .map(Target::Tcp)
            .map_err(|e| format!("{s:?} is neither unix:PATH nor HOST:PORT ({e})"))
    }
}

/// A gRPC channel of one HTTP/2 connection, like one Envoy worker's.
pub async fn connect(target: &Target) -> anyhow::Result<ExternalProcessorClient<Channel>> {
    let channel = match target {
        Target::Unix(path) => {
            let path = path.clone();
            Endpoint::from_static("http://ext-proc")
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                            tokio::net::UnixStream::connect(path).await?,
                        ))
                    }
                }))
                .await?
        }
        Target::Tcp(addr) => {
            Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await?
        }
    };
    Ok(ExternalProcessorClient::new(channel)
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        assert_eq!("unix:/tmp/k.sock".parse(), Ok(Target::Unix("/tmp/k.sock".into())));
        assert_eq!("/tmp/k.sock".parse(), Ok(Target::Unix("/tmp/k.sock".into())));
        assert_eq!(
            "127.0.0.1:9001".parse(),
            Ok(Target::Tcp("127.0.0.1:9001".parse().unwrap()))
        );
        assert!("nonsense".parse::<Target>().is_err());
    }
}
