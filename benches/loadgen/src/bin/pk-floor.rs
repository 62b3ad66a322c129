//! `pk-floor`: the physical floor of an ext_proc processor. A tonic
//! `ExternalProcessor` that answers CONTINUE to every message and does
//! nothing else, served the way the kernel serves (same tonic server, same
//! stream shape, same message limits, Unix socket). Whatever CPU it spends
//! per stream is the price of gRPC over HTTP/2 itself. It uses the kernel's
//! allocator (mimalloc) and its socket (`policy_net`: epoll asked for
//! readability only), and, like the kernel, answers a first message that came
//! with the stream's headers before returning the response, so that the
//! response headers and the first answer leave in one write: the comparison
//! is not one of allocators or transports.

use std::path::PathBuf;
use std::pin::Pin;

use clap::Parser;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures::{FutureExt, Stream, StreamExt};
use tokio::net::UnixListener;
use tonic::{Request, Response, Status, Streaming};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "pk-floor", about = "ext_proc server answering CONTINUE to everything")]
struct Cli {
    /// Unix socket to serve on (a stale file is replaced).
    #[arg(long)]
    socket: PathBuf,
    /// HTTP/2 streams per connection (the kernel's default).
    #[arg(long, default_value_t = 1000)]
    max_concurrent_streams: u32,
}

struct Floor;

type ResponseStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for Floor {
    type ProcessStream = ResponseStream;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let mut inbound = request.into_inner();
        let first = match inbound.message().now_or_never() {
            Some(Ok(Some(msg))) => Some(Ok(pk_loadgen::msgs::continue_for(&msg))),
            Some(Ok(None) | Err(_)) => return Ok(Response::new(Box::pin(futures::stream::empty()))),
            None => None,
        };
        let rest = futures::stream::unfold(inbound, |mut inbound| async move {
            match inbound.message().await {
                Ok(Some(msg)) => Some((Ok(pk_loadgen::msgs::continue_for(&msg)), inbound)),
                Ok(None) | Err(_) => None,
            }
        });
        let stream = futures::stream::iter(first).chain(rest);
        Ok(Response::new(Box::pin(stream)))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.socket.exists() {
        std::fs::remove_file(&cli.socket)?;
    }
    let listener = UnixListener::bind(&cli.socket)?;
    eprintln!("pk-floor serving on {}", cli.socket.display());
    let shutdown = async {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    let result = tonic::transport::Server::builder()
        .max_concurrent_streams(cli.max_concurrent_streams)
        .add_service(
            ExternalProcessorServer::new(Floor)
                .max_decoding_message_size(64 * 1024 * 1024)
                .max_encoding_message_size(64 * 1024 * 1024),
        )
        .serve_with_incoming_shutdown(policy_net::incoming(listener), shutdown)
        .await;
    let _ = std::fs::remove_file(&cli.socket);
    Ok(result?)
}
