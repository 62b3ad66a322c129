//! One `Process` stream, i.e. one HTTP request through Envoy's ext_proc
//! filter: request headers (the first message goes out with the stream's
//! HTTP/2 HEADERS, as Envoy sends it), the request body when the answer
//! switched on BUFFERED request body mode, response headers, the response
//! body likewise, then the half-close and the server's trailers.

use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::msgs::{self, BadAnswer, Phase, RequestShape};

/// Bodies sent when asked for, built once.
#[derive(Debug, Clone, Default)]
pub struct Bodies {
    /// The request body (JSON).
    pub request: Vec<u8>,
    /// The response body (JSON).
    pub response: Vec<u8>,
}

impl Bodies {
    /// JSON bodies of the shape's sizes.
    pub fn for_shape(shape: &RequestShape) -> Self {
        let body = |n: usize| if n == 0 { Vec::new() } else { msgs::json_body(n) };
        Self {
            request: body(shape.request_body),
            response: body(shape.response_body),
        }
    }
}

/// What one stream saw besides CONTINUE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observed {
    /// Some answer's `mode_override` asked for a body.
    pub mode_override: bool,
    /// The request body was asked for and sent.
    pub request_body_sent: bool,
    /// The response body was asked for and sent.
    pub response_body_sent: bool,
    /// Some answer carried header or body mutations.
    pub mutated: bool,
    /// Messages sent on the stream.
    pub messages: u32,
}

/// Why a stream failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// An answer that is not a CONTINUE to the message sent.
    Answer(Phase, BadAnswer),
    /// The gRPC stream failed with this status code.
    Status(tonic::Code),
    /// The server ended the stream before answering.
    Ended(Phase),
    /// The server sent a message nobody asked for.
    Extra,
    /// The stream did not finish in time (counted by the caller).
    Timeout,
}

impl StreamError {
    /// Short name for reports.
    pub fn kind(&self) -> &'static str {
        match self {
            StreamError::Answer(_, BadAnswer::Immediate) => "immediate_response",
            StreamError::Answer(_, BadAnswer::NotContinue) => "not_continue",
            StreamError::Answer(_, BadAnswer::WrongKind) => "wrong_answer",
            StreamError::Status(_) => "grpc_status",
            StreamError::Ended(_) => "ended_early",
            StreamError::Extra => "extra_message",
            StreamError::Timeout => "timeout",
        }
    }
}

struct Open {
    tx: mpsc::Sender<ProcessingRequest>,
    rx: tonic::Streaming<ProcessingResponse>,
}

impl Open {
    async fn answer(&mut self, phase: Phase) -> Result<msgs::Good, StreamError> {
        match self.rx.message().await {
            Ok(Some(resp)) => msgs::check(&resp, phase).map_err(|e| StreamError::Answer(phase, e)),
            Ok(None) => Err(StreamError::Ended(phase)),
            Err(s) => Err(StreamError::Status(s.code())),
        }
    }

    async fn exchange(&mut self, msg: ProcessingRequest, phase: Phase) -> Result<msgs::Good, StreamError> {
        if self.tx.send(msg).await.is_err() {
            // The request stream was dropped: the call failed; its status
            // comes with the next read.
            return match self.rx.message().await {
                Err(s) => Err(StreamError::Status(s.code())),
                _ => Err(StreamError::Ended(phase)),
            };
        }
        self.answer(phase).await
    }
}

/// Runs one whole stream on `client`.
pub async fn run_stream(
    client: &mut ExternalProcessorClient<Channel>,
    shape: &RequestShape,
    bodies: &Bodies,
    request_id: &str,
) -> Result<Observed, StreamError> {
    let mut seen = Observed::default();
    let (tx, rx) = mpsc::channel(2);
    // Queued before the call starts, so it leaves with the HEADERS frame.
    let _ = tx.try_send(msgs::request_headers(shape, request_id));
    seen.messages += 1;
    let rx = client
        .process(ReceiverStream::new(rx))
        .await
        .map_err(|s| StreamError::Status(s.code()))?
        .into_inner();
    let mut s = Open { tx, rx };
    let note = |seen: &mut Observed, g: &msgs::Good| {
        seen.mode_override |= g.buffers_a_body();
        seen.mutated |= g.mutated;
    };

    let first = s.answer(Phase::RequestHeaders).await?;
    note(&mut seen, &first);
    let mut response_body = first.buffers_response_body();
    if shape.request_body > 0 && first.buffers_request_body() {
        let g = s
            .exchange(msgs::request_body(bodies.request.clone()), Phase::RequestBody)
            .await?;
        note(&mut seen, &g);
        seen.request_body_sent = true;
        seen.messages += 1;
    }
    // As Envoy: no response headers message when the override skipped it.
    if !first.skips_response_headers() || response_body {
        let g = s
            .exchange(msgs::response_headers(shape), Phase::ResponseHeaders)
            .await?;
        seen.messages += 1;
        note(&mut seen, &g);
        response_body |= g.buffers_response_body();
    }
    if response_body {
        let g = s
            .exchange(msgs::response_body(bodies.response.clone()), Phase::ResponseBody)
            .await?;
        note(&mut seen, &g);
        seen.response_body_sent = true;
        seen.messages += 1;
    }
    // Envoy half-closes once processing is done; the server then ends the
    // call with its trailers.
    let Open { tx, mut rx } = s;
    drop(tx);
    match rx.message().await {
        Ok(None) => Ok(seen),
        Ok(Some(_)) => Err(StreamError::Extra),
        Err(st) => Err(StreamError::Status(st.code())),
    }
}
