//! Authentication and authorization policies of `auth-agent`.
//!
//! * [`ApiKeyAuth`] (`apiKeyAuth`): keys checked against a file of SHA-256 hashes.
//! * [`JwtValidation`] (`jwtValidation`): RS256/ES256/HS256 bearer tokens.
//! * [`RoleCheck`] (`roleCheck`): roles from metadata against required roles.

mod api_key;
mod jwks;
mod jwt;
mod roles;

pub use api_key::{ApiKeyAuth, ApiKeyError, ApiKeyStore};
pub use jwks::KeyError;
pub use jwt::JwtValidation;
pub use roles::RoleCheck;

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
