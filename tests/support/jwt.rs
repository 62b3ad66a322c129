//! HS256 JWTs for the MCP end-to-end tests, as `jwtValidation` checks them
//! there (issuer `https://auth.example.com`, audience `mcp`).

use serde_json::json;

use super::reference;

/// A token for `sub` with `roles`, valid ten minutes, signed with `secret`.
pub fn jwt(secret: &str, sub: &str, roles: &[&str]) -> String {
    let now = reference::now();
    let claims = json!({"sub": sub, "iss": "https://auth.example.com", "aud": "mcp", "roles": roles, "iat": now, "exp": now + 600});
    reference::jwt(secret, &claims)
}

/// `jwtValidation`'s params for these tokens (the secret from
/// `DEMO_JWT_SECRET`), as a flow mapping for a kernel config.
pub const JWT_PARAMS: &str =
    r#"{issuer: "https://auth.example.com", audience: "mcp", hs256_secret_env: "DEMO_JWT_SECRET"}"#;
