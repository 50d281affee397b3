//! `--push-gateway URL`: a finished run's metrics sent to a Prometheus Pushgateway with one
//! HTTP `PUT` to `URL/metrics/job/hakaru/<key>@base64/<value>...`, which replaces the group's
//! previous push. Label values are base64url-encoded in the path (the Pushgateway's rule for
//! values that may hold `/`), so any label value is safe.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use hakaru_proto::http::{parse_response, request_head, Url};

/// The longest a push waits to connect, to send, and for the answer.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The path a push goes to under the gateway's URL.
pub fn group_path(base: &Url, job: &str, grouping: &[(String, String)]) -> String {
    let mut p = base.path.trim_end_matches('/').to_string();
    p += "/metrics/job@base64/";
    p += &base64url(job);
    for (k, v) in grouping {
        p += &format!("/{k}@base64/{}", base64url(v));
    }
    p
}

/// Pushes `body` (text exposition) to the group; the error says what the gateway answered.
pub fn push(url: &str, job: &str, grouping: &[(String, String)], body: &str) -> Result<(), String> {
    let base = Url::parse(url).map_err(|e| format!("--push-gateway {url}: {e}"))?;
    if base.tls {
        return Err(format!(
            "--push-gateway {url}: https is not supported; give the gateway's http:// address"
        ));
    }
    let target = Url {
        path: group_path(&base, job, grouping),
        ..base.clone()
    };
    let addr = (base.host.as_str(), base.port)
        .to_socket_addrs()
        .map_err(|e| format!("--push-gateway {url}: cannot resolve {}: {e}", base.host))?
        .next()
        .ok_or_else(|| format!("--push-gateway {url}: {} has no address", base.host))?;
    let fail = |what: &str, e: std::io::Error| format!("--push-gateway {url}: {what}: {e}");
    let mut s = TcpStream::connect_timeout(&addr, PUSH_TIMEOUT)
        .map_err(|e| fail(&format!("cannot connect to {addr}"), e))?;
    s.set_read_timeout(Some(PUSH_TIMEOUT)).ok();
    s.set_write_timeout(Some(PUSH_TIMEOUT)).ok();
    let headers = vec![
        (
            "Content-Type".to_string(),
            "text/plain; version=0.0.4; charset=utf-8".to_string(),
        ),
        ("Connection".to_string(), "close".to_string()),
    ];
    let mut req = request_head("PUT", &target, &headers, Some(body.len() as u64), None);
    req.extend_from_slice(body.as_bytes());
    s.write_all(&req).map_err(|e| fail("sending", e))?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        match parse_response(&buf, false) {
            Ok(Some(head)) => {
                if (200..300).contains(&head.status) {
                    return Ok(());
                }
                // The gateway explains a refusal in the body; show its start.
                let _ = s
                    .read(&mut chunk)
                    .map(|n| buf.extend_from_slice(&chunk[..n]));
                let text = String::from_utf8_lossy(&buf[head.head_len.min(buf.len())..]);
                let why: String = text.trim().chars().take(300).collect();
                return Err(format!(
                    "--push-gateway {url}: the gateway answered {} {}{}",
                    head.status,
                    head.reason,
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(": {why}")
                    }
                ));
            }
            Ok(None) => {}
            Err(e) => return Err(format!("--push-gateway {url}: not an HTTP answer: {e}")),
        }
        match s.read(&mut chunk) {
            Ok(0) => {
                return Err(format!(
                    "--push-gateway {url}: the gateway closed the connection without an answer"
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(fail("waiting for the answer", e)),
        }
    }
}

/// RFC 4648 base64 with the URL-safe alphabet, padded (what the Pushgateway decodes).
pub fn base64url(s: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let b = s.as_bytes();
    if b.is_empty() {
        // The Pushgateway's spelling of an empty value.
        return "=".into();
    }
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                out.push(A[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_rfc4648_vectors() {
        for (plain, enc) in [
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
            ("a/b?", "YS9iPw=="),
            ("\u{ff}\u{fe}", "w7_Dvg=="),
            ("", "="),
        ] {
            assert_eq!(base64url(plain), enc, "{plain:?}");
        }
    }

    #[test]
    fn the_group_path_keeps_a_base_path() {
        let u = Url::parse("http://gw:9091/prefix/").unwrap();
        let p = group_path(&u, "hakaru", &[("kind".into(), "tcp".into())]);
        assert_eq!(p, "/prefix/metrics/job@base64/aGFrYXJ1/kind@base64/dGNw");
    }
}
