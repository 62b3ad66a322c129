//! HTTP/2 written frame by frame, for what a well-behaved client library
//! will not send at once: a burst of streams opened and cancelled in one
//! write, as Envoy (or the kernel) sends them under overload.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// One frame: type, flags, stream, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small frame").to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Reads frames until one of `kind` with `flags` set: its payload. A GOAWAY
/// or the end of the connection first is an error.
fn read_until(conn: &mut UnixStream, kind: u8, flags: u8) -> Result<Vec<u8>, String> {
    loop {
        let mut head = [0u8; 9];
        conn.read_exact(&mut head)
            .map_err(|e| format!("connection ended: {e}"))?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        conn.read_exact(&mut payload)
            .map_err(|e| format!("connection ended: {e}"))?;
        if head[3] == 7 && payload.len() >= 8 {
            let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
            return Err(format!(
                "the server closed the connection: GOAWAY, error code {code:#x}"
            ));
        }
        if head[3] == kind && head[4] & flags == flags {
            return Ok(payload);
        }
    }
}

/// Opens `n` gRPC streams to `path` on the server at `socket` and cancels
/// each (RST_STREAM CANCEL) in the same write, so the server reads them all
/// before it can accept any; then checks that the connection still answers
/// a PING.
pub fn cancel_burst(socket: &Path, path: &str, n: u32) -> Result<(), String> {
    let mut conn = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    // HPACK without Huffman or indexing: POST, http, the path, an
    // authority, content-type and te.
    let mut headers = vec![0x83, 0x86];
    for (prefix, value) in [
        (&[0x04][..], path),
        (&[0x01], "policy-kernel"),
        (&[0x0f, 0x10], "application/grpc"),
        (&[0x00, 0x02, b't', b'e'], "trailers"),
    ] {
        headers.extend_from_slice(prefix);
        headers.push(u8::try_from(value.len()).expect("short header value"));
        headers.extend_from_slice(value.as_bytes());
    }
    let mut burst = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    burst.extend(frame(4, 0, 0, &[]));
    for i in 0..n {
        let stream = 2 * i + 1;
        burst.extend(frame(1, 0x4, stream, &headers)); // HEADERS, END_HEADERS
        burst.extend(frame(3, 0, stream, &8u32.to_be_bytes())); // RST_STREAM CANCEL
    }
    conn.write_all(&burst).map_err(|e| format!("write: {e}"))?;
    read_until(&mut conn, 4, 0)?; // the server's SETTINGS
    let mut ping = frame(4, 0x1, 0, &[]); // acknowledged
    ping.extend(frame(6, 0, 0, b"pk-alive"));
    conn.write_all(&ping).map_err(|e| format!("write: {e}"))?;
    let ack = read_until(&mut conn, 6, 0x1)?;
    if ack != b"pk-alive" {
        return Err(format!("PING answered with {ack:?}"));
    }
    Ok(())
}
