//! The gRPC codec of the kernel <-> agent protocol: prost, like
//! `tonic_prost::ProstCodec`, but a received message is decoded from one
//! contiguous [`Bytes`] rather than through tonic's incremental buffer.
//!
//! tonic hands a decoder the message as a `DecodeBuf` over its receive
//! buffer, and prost then reads every tag, length and field through that
//! `Buf` (a bounds-checked `BytesMut` advance each time). Taking the message
//! out as one `Bytes` first (no copy: a split of the receive buffer) lets
//! prost read a plain slice, and `bytes` fields (header values, bodies) are
//! slices of it. The result is the same message, field for field; the
//! encoder is prost's, unchanged. Decoding a call's request context was a
//! third of a no-op agent's CPU per call (benches/RESULTS.md).

use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

/// Prost codec that decodes each message from one contiguous buffer. Named
/// in the generated clients and servers (`tonic_prost_build`'s
/// `codec_path`).
#[derive(Debug, Clone)]
pub struct ContiguousCodec<T, U> {
    _types: PhantomData<fn(T) -> U>,
}

impl<T, U> Default for ContiguousCodec<T, U> {
    fn default() -> Self {
        Self { _types: PhantomData }
    }
}

impl<T, U> Codec for ContiguousCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ContiguousDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ContiguousDecoder { _type: PhantomData }
    }
}

/// Decodes a message from the whole of tonic's message buffer at once.
#[derive(Debug)]
pub struct ContiguousDecoder<U> {
    _type: PhantomData<fn() -> U>,
}

impl<U: Message + Default> Decoder for ContiguousDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let message: Bytes = buf.copy_to_bytes(buf.remaining());
        // Same error as tonic_prost's decoder.
        U::decode(message)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use futures::StreamExt;
    use http_body_util::StreamBody;
    use tonic::codec::Streaming;

    /// A message with the field kinds the protocol uses: strings, bytes, a
    /// nested repeated message, a map, an integer.
    #[derive(Clone, PartialEq, Message)]
    struct Header {
        #[prost(string, tag = "1")]
        key: String,
        #[prost(bytes = "bytes", tag = "3")]
        raw_value: Bytes,
    }

    #[derive(Clone, PartialEq, Message)]
    struct Call {
        #[prost(string, tag = "1")]
        request_id: String,
        #[prost(message, repeated, tag = "2")]
        headers: Vec<Header>,
        #[prost(int64, tag = "4")]
        deadline_ms: i64,
        #[prost(map = "string, string", tag = "5")]
        metadata: std::collections::HashMap<String, String>,
        #[prost(bytes = "bytes", tag = "6")]
        body: Bytes,
    }

    fn sample(id: &str) -> Call {
        Call {
            request_id: id.into(),
            headers: (0..15)
                .map(|i| Header {
                    key: format!("x-header-{i}"),
                    raw_value: Bytes::from(format!("value \u{e9} {i}")),
                })
                .collect(),
            deadline_ms: 480,
            metadata: [("tenant".to_string(), "acme".to_string())].into_iter().collect(),
            body: Bytes::from(vec![0u8, 255, 10, 13]),
        }
    }

    /// gRPC length-prefixed frames of `messages`, cut into chunks of `cut`
    /// bytes (as HTTP/2 DATA frames may cut them).
    fn wire(messages: &[Vec<u8>], cut: usize) -> Vec<Bytes> {
        let mut all = BytesMut::new();
        for m in messages {
            all.put_u8(0);
            all.put_u32(m.len() as u32);
            all.put_slice(m);
        }
        all.chunks(cut).map(Bytes::copy_from_slice).collect()
    }

    async fn decode_all(chunks: Vec<Bytes>) -> Vec<Result<Call, Status>> {
        let frames = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::convert::Infallible>(http_body::Frame::data(c))),
        );
        let decoder = ContiguousCodec::<Call, Call>::default().decoder();
        Streaming::new_request(decoder, StreamBody::new(frames), None, None)
            .collect()
            .await
    }

    #[tokio::test]
    async fn decodes_what_prost_encodes_field_for_field_across_frames() {
        let (a, b) = (sample("a"), sample("b"));
        for cut in [7, 64, 100_000] {
            let got = decode_all(wire(&[a.encode_to_vec(), b.encode_to_vec()], cut)).await;
            let got: Vec<Call> = got.into_iter().map(|r| r.expect("decodes")).collect();
            assert_eq!(got, vec![a.clone(), b.clone()], "chunks of {cut} bytes");
        }
    }

    #[tokio::test]
    async fn a_malformed_message_is_an_internal_error() {
        let mut bad = sample("a").encode_to_vec();
        bad.truncate(bad.len() - 3);
        let got = decode_all(wire(&[bad], 64)).await;
        let err = got.into_iter().next().expect("one item").expect_err("truncated");
        assert_eq!(err.code(), tonic::Code::Internal);
    }
}
