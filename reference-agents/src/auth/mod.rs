//! Authentication and authorization policies of `auth-agent`.
//!
//! * [`ApiKeyAuth`] (`apiKeyAuth`): keys checked against a file of SHA-256 hashes.
//! * [`JwtValidation`] (`jwtValidation`): bearer JWTs (RS256/384/512,
//!   PS256/384/512, ES256, ES384, EdDSA, HS256), keys from a JWKS file, an
//!   HS256 secret, or an identity provider (`jwks_uri`, or OIDC discovery
//!   from `issuer`), cached per `Cache-Control` and refreshed on an unknown
//!   `kid` at a bounded rate.
//! * [`TokenIntrospection`] (`tokenIntrospection`): opaque tokens checked at
//!   the provider's RFC 7662 endpoint, answers cached; the same metadata as
//!   `jwtValidation`.
//! * [`OauthProtectedResource`] (`oauthProtectedResource`): serves the RFC 9728
//!   protected resource metadata document that the 401 challenges point to.
//! * [`RoleCheck`] (`roleCheck`): roles from metadata against required roles.
//! * [`TokenExchange`] (`tokenExchange`): after `jwtValidation` or
//!   `tokenIntrospection`, the caller's token exchanged (RFC 8693) for one
//!   issued for the upstream, cached; the caller's token never goes on.
//!
//! Every param is described in `docs/identity.md`.
//!
//! # Layout
//!
//! * `jwt`, `jwt_params`: the `jwtValidation` policy and its checked params.
//! * `jwks`: JWK sets (files and published sets) and the key families.
//! * `remote_keys`: keys fetched from a provider: cache, refresh, stale keys.
//! * `fetch`: HTTPS to providers (endpoint checks, CA file, bounded reads).
//! * `introspection`: `tokenIntrospection`.
//! * `resource_metadata`: `oauthProtectedResource` and the challenges.
//! * `token_exchange`: `tokenExchange` (its client credentials in
//!   `token_exchange_credentials.rs`).
//! * `metrics`: the Prometheus series of key fetches, refreshes, stale
//!   keys and introspection (the agent's `--metrics-addr`).

mod api_key;
pub(crate) mod fetch;
mod introspection;
pub(crate) mod jwks;
mod jwt;
mod jwt_params;
pub mod metrics;
pub(crate) mod remote_keys;
mod resource_metadata;
mod roles;
#[cfg(test)]
mod stub_idp;
mod token_exchange;

pub use api_key::{ApiKeyAuth, ApiKeyError, ApiKeyStore};
pub use fetch::FetchError;
pub use introspection::{TokenIntrospection, INTROSPECTIONS_PER_S};
pub use jwks::KeyError;
pub use jwt::JwtValidation;
pub(crate) use jwt_params::public_url;
pub use resource_metadata::{bearer_challenge, OauthProtectedResource};
pub use roles::RoleCheck;
pub use token_exchange::TokenExchange;

use crate::error_body;
use policy_agents::{Deny, RequestOutcome};

/// A 401 with `{"error":"unauthorized","reason":reason}` and a challenge.
fn unauthorized(reason: &str, challenge: &str) -> RequestOutcome {
    RequestOutcome::denied_with(
        Deny::json(401, &error_body("unauthorized", reason))
            .header("www-authenticate", challenge)
            .reason("authentication_failed"),
    )
}
