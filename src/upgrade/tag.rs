//! The generation header (`server.generations.header`): the number of the
//! generation that answered, on every request the kernel lets through (the
//! request Envoy sends upstream, so the upstream and Envoy's access log with
//! `%REQ(NAME)%` see it), on the kernel's immediate answers and on the
//! response headers the kernel processes. The value overwrites one the
//! client sent.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_response::Response, HeadersResponse, ProcessingResponse,
};

use crate::config::ServerConfig;

/// The header and this generation's number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    name: String,
    value: Vec<u8>,
}

impl Tag {
    /// The tag of `generation` when `server.generations.header` is set.
    pub fn from_config(server: &ServerConfig, generation: u64) -> Option<Arc<Self>> {
        server.generations.header.as_ref().map(|name| {
            Arc::new(Self {
                name: name.clone(),
                value: generation.to_string().into_bytes(),
            })
        })
    }

    fn option(&self) -> HeaderValueOption {
        HeaderValueOption {
            header: Some(HeaderValue {
                key: self.name.clone(),
                value: String::new(),
                raw_value: self.value.clone(),
            }),
            // No `append`: the value replaces any the client sent.
            ..Default::default()
        }
    }

    /// Adds the header to an answer to request or response headers, or to an
    /// immediate answer; other answers are left as they are.
    pub fn apply(&self, resp: &mut ProcessingResponse) {
        let headers = |h: &mut HeadersResponse| {
            h.response
                .get_or_insert_with(Default::default)
                .header_mutation
                .get_or_insert_with(Default::default)
                .set_headers
                .push(self.option());
        };
        match resp.response.as_mut() {
            Some(Response::RequestHeaders(h)) | Some(Response::ResponseHeaders(h)) => headers(h),
            Some(Response::ImmediateResponse(i)) => i
                .headers
                .get_or_insert_with(Default::default)
                .set_headers
                .push(self.option()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ext_proc::v3::{BodyResponse, ImmediateResponse};

    fn tag() -> Tag {
        let mut server = ServerConfig::default();
        server.generations.header = Some("x-policy-kernel-generation".into());
        let t = Tag::from_config(&server, 7).expect("tag");
        (*t).clone()
    }

    fn set_headers(resp: &ProcessingResponse) -> Vec<(String, Vec<u8>)> {
        let mutation = match resp.response.as_ref() {
            Some(Response::RequestHeaders(h)) | Some(Response::ResponseHeaders(h)) => {
                h.response.as_ref().and_then(|c| c.header_mutation.clone())
            }
            Some(Response::ImmediateResponse(i)) => i.headers.clone(),
            _ => None,
        };
        mutation
            .map(|m| {
                m.set_headers
                    .into_iter()
                    .filter_map(|o| o.header.map(|h| (h.key, h.raw_value)))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn no_header_without_the_setting() {
        assert!(Tag::from_config(&ServerConfig::default(), 3).is_none());
    }

    #[test]
    fn headers_answers_and_immediate_answers_get_the_number() {
        let t = tag();
        for resp in [
            Response::RequestHeaders(HeadersResponse::default()),
            Response::ResponseHeaders(HeadersResponse::default()),
            Response::ImmediateResponse(ImmediateResponse::default()),
        ] {
            let mut resp = ProcessingResponse {
                response: Some(resp),
                ..Default::default()
            };
            t.apply(&mut resp);
            assert_eq!(
                set_headers(&resp),
                vec![("x-policy-kernel-generation".to_string(), b"7".to_vec())]
            );
            let opt = t.option();
            #[allow(deprecated)]
            let append = opt.append;
            assert!(append.is_none(), "the value must overwrite the client's");
        }
    }

    #[test]
    fn body_answers_are_left_alone() {
        let mut resp = ProcessingResponse {
            response: Some(Response::RequestBody(BodyResponse::default())),
            ..Default::default()
        };
        let before = resp.clone();
        tag().apply(&mut resp);
        assert_eq!(resp, before);
    }
}
