//! A direct ext_proc client: opens `Process` streams to the kernel exactly as
//! Envoy does, over the kernel's Unix socket.

use std::path::Path;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

/// The ext_proc client type.
pub type Client = ExternalProcessorClient<Channel>;

/// Connects to the kernel's Unix socket.
pub async fn connect(socket: &Path) -> Client {
    let path = socket.to_path_buf();
    let channel = Endpoint::from_static("http://kernel")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .expect("connect to kernel");
    ExternalProcessorClient::new(channel)
}

/// Headers as Envoy sends them (`raw_value`).
pub fn headers(pairs: &[(&str, &str)], end_of_stream: bool) -> HttpHeaders {
    HttpHeaders {
        headers: Some(HeaderMap {
            headers: pairs
                .iter()
                .map(|(k, v)| HeaderValue {
                    key: k.to_string(),
                    value: String::new(),
                    raw_value: v.as_bytes().to_vec(),
                })
                .collect(),
        }),
        end_of_stream,
        ..Default::default()
    }
}

/// A `request_headers` message, with the `xds.route_name` attribute when given.
pub fn request_headers(route: Option<&str>, pairs: &[(&str, &str)]) -> ProcessingRequest {
    let mut msg = ProcessingRequest {
        request: Some(Request::RequestHeaders(headers(pairs, true))),
        ..Default::default()
    };
    if let Some(r) = route {
        let mut fields = Struct::default();
        fields.fields.insert(
            "xds.route_name".into(),
            Value {
                kind: Some(Kind::StringValue(r.into())),
            },
        );
        msg.attributes.insert("envoy.filters.http.ext_proc".into(), fields);
    }
    msg
}

/// A `response_headers` message.
pub fn response_headers(status: u16) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::ResponseHeaders(headers(
            &[(":status", &status.to_string())],
            true,
        ))),
        ..Default::default()
    }
}

/// One open Process stream.
pub struct Stream {
    pub tx: mpsc::Sender<ProcessingRequest>,
    pub rx: tonic::Streaming<ProcessingResponse>,
}

impl Stream {
    /// Opens a stream; `route_metadata` becomes the `x-route-name` gRPC metadata.
    pub async fn open(client: &mut ExternalProcessorClient<Channel>, route_metadata: Option<&str>) -> Self {
        let (tx, rx) = mpsc::channel(4);
        let mut req = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(r) = route_metadata {
            req.metadata_mut().insert("x-route-name", r.parse().expect("metadata"));
        }
        let rx = client.process(req).await.expect("process").into_inner();
        Self { tx, rx }
    }

    /// Sends one message and waits for its answer.
    pub async fn exchange(&mut self, msg: ProcessingRequest) -> ProcessingResponse {
        self.tx.send(msg).await.expect("send");
        self.rx.message().await.expect("answer").expect("stream ended")
    }
}
