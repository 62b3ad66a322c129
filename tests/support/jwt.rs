//! HS256 JWTs for the end-to-end tests, as `jwtValidation` checks them
//! (issuer `https://auth.example.com`, audience `mcp`), signed with
//! `python3`'s hmac.

use std::process::Command;

use serde_json::json;

fn b64(data: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// A token for `sub` with `roles`, valid ten minutes, signed with `secret`.
pub fn jwt(secret: &str, sub: &str, roles: &[&str]) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let head = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = json!({"sub": sub, "iss": "https://auth.example.com", "aud": "mcp", "roles": roles, "iat": now, "exp": now + 600});
    let signing = format!("{head}.{}", b64(claims.to_string().as_bytes()));
    let out = Command::new("python3")
        .args(["-c", "import hmac,hashlib,base64,sys; print(base64.urlsafe_b64encode(hmac.new(sys.argv[1].encode(), sys.argv[2].encode(), hashlib.sha256).digest()).rstrip(b'=').decode())", secret, &signing])
        .output()
        .expect("python3");
    format!("{signing}.{}", String::from_utf8_lossy(&out.stdout).trim())
}
