//! Asking agents for their views: `GET /mesh` on each agent's mesh port (TCP), one thread per
//! agent in batches, each exchange bounded in time and size.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::view::AgentView;

/// Largest view read (10,000 peers make about 1.5 MB).
const MAX_VIEW: usize = 32 << 20;
/// Agents asked at once.
const BATCH: usize = 32;

/// One agent's view, or why there is none.
pub fn fetch(addr: SocketAddr, timeout: Duration) -> Result<AgentView, String> {
    let deadline = Instant::now() + timeout;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    let _ = s.set_write_timeout(Some(timeout));
    let req = format!("GET /mesh HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no whole answer within {} s",
                timeout.as_secs_f64()
            ));
        }
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                body.extend_from_slice(&buf[..n]);
                if body.len() > MAX_VIEW {
                    return Err(format!("answer larger than {MAX_VIEW} bytes"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!(
                    "no whole answer within {} s",
                    timeout.as_secs_f64()
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let text = String::from_utf8_lossy(&body);
    let (head, json) = text.split_once("\r\n\r\n").ok_or("not an HTTP answer")?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        let line = head.lines().next().unwrap_or("");
        return Err(format!("{line}: {}", json.trim()));
    }
    serde_json::from_str(json).map_err(|e| format!("not a mesh view: {e}"))
}

/// Every agent's view, in order.
pub fn fetch_all(addrs: &[SocketAddr], timeout: Duration) -> Vec<Result<AgentView, String>> {
    let mut out = Vec::with_capacity(addrs.len());
    for chunk in addrs.chunks(BATCH) {
        let got: Vec<Result<AgentView, String>> = std::thread::scope(|sc| {
            let hs: Vec<_> = chunk
                .iter()
                .map(|&a| sc.spawn(move || fetch(a, timeout)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("the fetch failed".into())))
                .collect()
        });
        out.extend(got);
    }
    out
}
