//! Test certificates made with rcgen: a CA, and leaf certificates for
//! `localhost` and `127.0.0.1` signed by it (usable as server or client
//! certificates), written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// Writes `text` to `dir/name`.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write pem");
    path
}

/// A self-signed CA named `name`.
pub fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("ca key")).expect("ca cert")
}

/// A leaf certificate `name` signed by `issuer`: (cert, key) PEM files.
pub fn leaf(dir: &Path, name: &str, issuer: &CertifiedIssuer<'static, KeyPair>) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).expect("params");
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let cert = params.signed_by(&key, issuer).expect("sign");
    (
        write(dir, &format!("{name}.pem"), &cert.pem()),
        write(dir, &format!("{name}.key"), &key.serialize_pem()),
    )
}
