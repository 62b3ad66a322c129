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
//!
//! Its streams have the kernel's shapes: with `--messages 2` (the default)
//! the request headers answer asks for the response headers (a
//! `mode_override`, as the kernel's does for a route with response policies:
//! K1), with `--messages 1` it skips them (an unknown route: K0). Like the
//! kernel, it ends a stream when Envoy half-closes it.
//!
//! With `--hop-agent SOCKET` it is the floor plus one agent round trip: each
//! request's headers go to that policy agent as one call on its call stream
//! ([`pk_loadgen::hop`]), and the answer waits for the agent's reply. That is
//! the limit of a processor that calls a separate agent process (hop.sh's
//! FH).

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use clap::Parser;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::{BodySendMode, HeaderSendMode};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Msg;
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures::{FutureExt, Stream, StreamExt};
use pk_loadgen::hop::Hop;
use tokio::net::UnixListener;
use tonic::{Request, Response, Status, Streaming};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "pk-floor", about = "ext_proc server answering CONTINUE to everything")]
struct Cli {
    /// Unix socket to serve on (a stale file is replaced).
    #[arg(long, required_unless_present = "port")]
    socket: Option<PathBuf>,
    /// Serve on this TCP port of 127.0.0.1 instead (TCP_NODELAY, as the
    /// kernel's TCP listener).
    #[arg(long, conflicts_with = "socket")]
    port: Option<u16>,
    /// HTTP/2 streams per connection (the kernel's default).
    #[arg(long, default_value_t = 1000)]
    max_concurrent_streams: u32,
    /// Messages per stream: 1 = request headers only (K0's shape), 2 = the
    /// response headers too (K1's shape).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    messages: u8,
    /// Answers each message this many milliseconds late (0: at once). For
    /// analysis: what a processor's latency alone costs Envoy (the kernel
    /// answers after its agent calls), apart from what its answers hold.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Calls this policy agent (its Unix socket) once per request, on its
    /// call stream, before answering the request headers.
    #[arg(long)]
    hop_agent: Option<PathBuf>,
    /// The policy each call runs.
    #[arg(long, default_value = "addHeader", requires = "hop_agent")]
    hop_policy: String,
    /// A param of that policy, NAME=VALUE (repeatable).
    #[arg(long, value_parser = param, requires = "hop_agent")]
    hop_param: Vec<(String, String)>,
}

fn param(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))
}

#[derive(Clone)]
struct Floor {
    messages: u8,
    delay: Option<std::time::Duration>,
    hop: Option<Arc<Hop>>,
}

impl Floor {
    /// CONTINUE to `msg`.
    fn answer(&self, msg: &ProcessingRequest) -> ProcessingResponse {
        let mut resp = pk_loadgen::msgs::continue_for(msg);
        if let Some(Msg::RequestHeaders(_)) = msg.request {
            let headers = if self.messages == 2 {
                HeaderSendMode::Send
            } else {
                HeaderSendMode::Skip
            };
            resp.mode_override = Some(ProcessingMode {
                request_header_mode: HeaderSendMode::Send as i32,
                response_header_mode: headers as i32,
                request_body_mode: BodySendMode::None as i32,
                response_body_mode: BodySendMode::None as i32,
                request_trailer_mode: HeaderSendMode::Skip as i32,
                response_trailer_mode: HeaderSendMode::Skip as i32,
            });
        }
        resp
    }

    /// [`Floor::answer`], `--delay-ms` late, after the agent's reply to
    /// the request headers with `--hop-agent` (an error status when the
    /// call failed).
    async fn reply(&self, mut msg: ProcessingRequest) -> Result<ProcessingResponse, Status> {
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        if let (Some(hop), Some(Msg::RequestHeaders(h))) = (&self.hop, &mut msg.request) {
            // The headers go into the call; the answer needs only the kind.
            if !hop.call(std::mem::take(h)).await {
                return Err(Status::unavailable("the agent call failed"));
            }
        }
        Ok(self.answer(&msg))
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for Floor {
    type ProcessStream = ResponseStream;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let mut inbound = request.into_inner();
        let floor = self.clone();
        let first = match inbound.message().now_or_never() {
            Some(Ok(Some(msg))) => Some(floor.reply(msg).await),
            Some(Ok(None) | Err(_)) => return Ok(Response::new(Box::pin(futures::stream::empty()))),
            None => None,
        };
        let rest = futures::stream::unfold(inbound, move |mut inbound| {
            let floor = floor.clone();
            async move {
                match inbound.message().await {
                    Ok(Some(msg)) => Some((floor.reply(msg).await, inbound)),
                    Ok(None) | Err(_) => None,
                }
            }
        });
        let stream = futures::stream::iter(first).chain(rest);
        Ok(Response::new(Box::pin(stream)))
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // As the kernel's: a current-thread runtime on one CPU.
    policy_net::runtime::build(0, "pk-floor")?.block_on(serve(cli))
}

async fn serve(cli: Cli) -> anyhow::Result<()> {
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
    let hop = match &cli.hop_agent {
        Some(socket) => Some(Arc::new(
            Hop::connect(socket, &cli.hop_policy, &cli.hop_param)
                .await
                .map_err(|e| anyhow::anyhow!("--hop-agent {}: {e}", socket.display()))?,
        )),
        None => None,
    };
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(cli.max_concurrent_streams)
        // As the kernel: Envoy's cancelled streams do not end the connection.
        .http2_max_pending_accept_reset_streams(Some(cli.max_concurrent_streams as usize))
        .add_service(
            ExternalProcessorServer::new(Floor {
                messages: cli.messages,
                delay: (cli.delay_ms > 0).then(|| std::time::Duration::from_millis(cli.delay_ms)),
                hop,
            })
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024),
        );
    if let Some(port) = cli.port {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        eprintln!("pk-floor serving on 127.0.0.1:{port}");
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        return Ok(router.serve_with_incoming_shutdown(incoming, shutdown).await?);
    }
    let Some(socket) = cli.socket else {
        anyhow::bail!("--socket or --port is required");
    };
    if socket.exists() {
        std::fs::remove_file(&socket)?;
    }
    let listener = UnixListener::bind(&socket)?;
    eprintln!("pk-floor serving on {}", socket.display());
    let result = router
        .serve_with_incoming_shutdown(policy_net::incoming(listener), shutdown)
        .await;
    let _ = std::fs::remove_file(&socket);
    Ok(result?)
}
