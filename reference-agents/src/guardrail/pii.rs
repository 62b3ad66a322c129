//! `piiRedaction`: masks personal data in request and response bodies with
//! `[REDACTED:<type>]` and counts it in metadata (`pii_redacted_<type>`,
//! `pii_redacted_total`). JSON bodies keep their structure: only string
//! values are rewritten.
//!
//! Types: `email`, `phone` (international `+CC`/`00CC` numbers of any
//! region, and the national formats of the `regions` param, confirmed with
//! libphonenumber's metadata), `credit_card`
//! (13-19 digits, IIN 2-6, Luhn-checked), `ssn` (US, dashed, valid ranges),
//! `iban` (mod-97 checked), `ipv4`.
//!
//! Streamed responses are redacted event by event, across event boundaries:
//! see [`super::pii_stream`].

use super::phone::{parse_region, PhoneRegion, DEFAULT_REGIONS};
use super::redactor::{Counts, PiiType, Redactor};
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, FromParams, ParamError, Params, Phase, Policy, PolicyError, RequestContext,
    RequestOutcome, ResponseContext, ResponseOutcome,
};

/// Parameters of `piiRedaction`.
#[derive(Debug, Clone)]
pub struct PiiParams {
    request: bool,
    response: bool,
    types: Vec<PiiType>,
    regions: Vec<PhoneRegion>,
}

impl FromParams for PiiParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        let phases = p.list("phases")?;
        let (mut request, mut response) = (phases.is_empty(), phases.is_empty());
        for ph in &phases {
            match ph.as_str() {
                "request" => request = true,
                "response" => response = true,
                "both" | "request_response" => (request, response) = (true, true),
                other => return Err(ParamError::invalid("phases", other, "expected request and/or response")),
            }
        }
        let names = p.list("types")?;
        let types = if names.is_empty() {
            PiiType::ALL.to_vec()
        } else {
            let mut types = Vec::new();
            for n in &names {
                types.push(PiiType::parse(n).ok_or_else(|| {
                    ParamError::invalid("types", n, "expected email, phone, credit_card, ssn, iban or ipv4")
                })?);
            }
            // Keep the application order of PiiType::ALL.
            PiiType::ALL.into_iter().filter(|t| types.contains(t)).collect()
        };
        let codes = p.list("regions")?;
        let regions = if codes.is_empty() {
            DEFAULT_REGIONS.to_vec()
        } else {
            let mut regions = Vec::new();
            for c in &codes {
                regions.push(parse_region(c).ok_or_else(|| {
                    ParamError::invalid("regions", c, "expected ISO 3166 region codes such as US, GB, DE, FR")
                })?);
            }
            regions
        };
        Ok(PiiParams {
            request,
            response,
            types,
            regions,
        })
    }
}

impl PiiParams {
    /// True when the response phase is enabled.
    pub(crate) fn response_enabled(&self) -> bool {
        self.response
    }

    /// The types to redact, in application order.
    pub(crate) fn types(&self) -> &[PiiType] {
        &self.types
    }

    /// The regions whose national phone formats are recognised.
    pub(crate) fn regions(&self) -> &[PhoneRegion] {
        &self.regions
    }
}

/// The `piiRedaction` policy.
#[derive(Debug, Clone, Default)]
pub struct PiiRedaction;

/// A redacted body and the metadata describing it.
type Redacted = (String, Vec<(String, String)>);

/// Redacts `body` if the phase is enabled: the new body and its metadata.
fn redact(
    params: &PiiParams,
    phase: Phase,
    body: Option<&[u8]>,
    encoding: Option<&str>,
) -> Result<Option<Redacted>, PolicyError> {
    let enabled = match phase {
        Phase::Request => params.request,
        Phase::Response => params.response,
    };
    let Some(body) = body.filter(|b| enabled && !b.is_empty()) else {
        return Ok(None);
    };
    if let Some(enc) = encoding.filter(|e| !e.eq_ignore_ascii_case("identity")) {
        return Err(PolicyError::new(format!("cannot inspect a {enc}-encoded body")));
    }
    let mut counts = Counts::new();
    let Some(new) = Redactor::shared()?.redact_body(body, &params.types, &params.regions, &mut counts) else {
        return Ok(None);
    };
    let total: usize = counts.iter().map(|(_, n)| n).sum();
    let mut metadata: Vec<(String, String)> = counts
        .iter()
        .map(|(t, n)| (format!("pii_redacted_{}", t.as_str()), n.to_string()))
        .collect();
    metadata.push(("pii_redacted_total".to_string(), total.to_string()));
    Ok(Some((new, metadata)))
}

impl Policy for PiiRedaction {
    type Params = PiiParams;
    describe! { name: "piiRedaction", params: &["phases", "types", "regions"], phases: Both, body: true, streams: true }

    async fn on_response_chunk(&self, params: &PiiParams, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        super::pii_stream::on_chunk(params, ctx)
    }

    async fn on_request(&self, params: &PiiParams, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let encoding = ctx.request.header("content-encoding");
        Ok(match redact(params, Phase::Request, ctx.request.body(), encoding)? {
            None => RequestOutcome::proceed(),
            Some((body, md)) => md
                .into_iter()
                .fold(RequestOutcome::proceed().set_body(body), |o, (k, v)| {
                    o.set_metadata(k, v)
                }),
        })
    }

    async fn on_response(&self, params: &PiiParams, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let encoding = ctx.response.header("content-encoding");
        Ok(match redact(params, Phase::Response, ctx.response.body(), encoding)? {
            None => ResponseOutcome::proceed(),
            Some((body, md)) => md
                .into_iter()
                .fold(ResponseOutcome::proceed().set_body(body), |o, (k, v)| {
                    o.set_metadata(k, v)
                }),
        })
    }
}

#[cfg(test)]
#[path = "pii_tests.rs"]
mod tests;
