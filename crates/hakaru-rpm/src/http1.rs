//! The rpm port's HTTP/1.1 side (a client that did not offer h2): the same four URLs, one
//! request at a time. A request head must arrive whole within the head timeout from its
//! first byte, however slowly it trickles (else 408 and close); a connection waits for the
//! next head at most [`IDLE`]. A request's body is read only on `/upload`; any
//! other request that carries one is answered and the connection closed, so the body is never
//! taken for the next head.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::conn::Io;
use crate::limits::{IDLE, MAX_HEAD, STALL};
use crate::route::{nq_document, parse_head, route, Head, Parsed, Route, CHUNK, LARGE, ZEROS};

/// Bytes one read of an upload's body may take.
const READ: usize = 64 << 10;

fn reply(status: &str, ty: &str, len: u64, close: bool) -> String {
    let conn = if close { "Connection: close\r\n" } else { "" };
    format!("HTTP/1.1 {status}\r\nContent-Type: {ty}\r\nContent-Length: {len}\r\n{conn}\r\n")
}

/// An answer to a request the server will not serve, then the connection ends; written
/// within a second or not at all.
async fn refuse(io: &mut Box<dyn Io>, status: &str) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        io.write_all(reply(status, "text/plain", 0, true).as_bytes())
            .await?;
        io.flush().await
    })
    .await;
}

/// Serves requests on `io` until the client closes, a limit ends it, or an error.
pub(crate) async fn serve(
    mut io: Box<dyn Io>,
    local: Option<SocketAddr>,
    head_timeout: Duration,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut tmp = vec![0u8; READ];
    loop {
        let Some(head) = read_head(&mut io, &mut buf, &mut tmp, head_timeout).await? else {
            return Ok(());
        };
        let keep = answer(&mut io, &mut buf, &mut tmp, head, local).await?;
        io.flush().await?;
        if !keep {
            return Ok(());
        }
    }
}

/// The next request head: `None` when the connection is to end (closed, idle, too slow, too
/// long or not HTTP; the last three are answered first).
async fn read_head(
    io: &mut Box<dyn Io>,
    buf: &mut Vec<u8>,
    tmp: &mut [u8],
    head_timeout: Duration,
) -> std::io::Result<Option<Head>> {
    let mut deadline: Option<Instant> = None;
    loop {
        match parse_head(buf, MAX_HEAD) {
            Parsed::Complete(head, n) => {
                buf.drain(..n);
                return Ok(Some(head));
            }
            Parsed::Partial => {}
            Parsed::TooLong => {
                refuse(io, "431 Request Header Fields Too Large").await;
                return Ok(None);
            }
            Parsed::Bad(_) => {
                refuse(io, "400 Bad Request").await;
                return Ok(None);
            }
        }
        // The head's clock starts at its first byte; before that the connection is idle.
        if deadline.is_none() && !buf.is_empty() {
            deadline = Some(Instant::now() + head_timeout);
        }
        let read = match deadline {
            Some(d) => tokio::time::timeout_at(d, io.read(tmp)).await,
            None => tokio::time::timeout(IDLE, io.read(tmp)).await,
        };
        let n = match read {
            Ok(r) => r?,
            Err(_) if deadline.is_some() => {
                refuse(io, "408 Request Timeout").await;
                return Ok(None);
            }
            Err(_) => return Ok(None),
        };
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(tmp.get(..n).unwrap_or_default());
    }
}

/// Answers one request; whether the connection may carry another.
async fn answer(
    io: &mut Box<dyn Io>,
    buf: &mut Vec<u8>,
    tmp: &mut [u8],
    head: Head,
    local: Option<SocketAddr>,
) -> std::io::Result<bool> {
    let r = route(&head.method, &head.path);
    // A body the server does not read ends the connection after the answer.
    let close = head.close || (!r.reads_body() && (head.length > 0 || head.chunked));
    const BIN: &str = "application/octet-stream";
    match r {
        Route::Config => {
            let doc = nq_document(head.host.as_deref(), local);
            let h = reply("200 OK", "application/json", doc.len() as u64, close);
            io.write_all(h.as_bytes()).await?;
            io.write_all(doc.as_bytes()).await?;
        }
        Route::Small => {
            io.write_all(reply("200 OK", BIN, 1, close).as_bytes())
                .await?;
            io.write_all(b"x").await?;
        }
        Route::Large => {
            io.write_all(reply("200 OK", BIN, LARGE, close).as_bytes())
                .await?;
            let mut left = LARGE;
            while left > 0 {
                let n = CHUNK.min(left as usize);
                match tokio::time::timeout(STALL, io.write(ZEROS.get(..n).unwrap_or_default()))
                    .await
                {
                    Ok(Ok(w)) if w > 0 => left -= w as u64,
                    _ => return Ok(false),
                }
            }
        }
        Route::Upload if head.chunked => {
            refuse(io, "411 Length Required").await;
            return Ok(false);
        }
        Route::Upload => {
            let mut left = head.length;
            let had = (buf.len() as u64).min(left);
            buf.drain(..had as usize);
            left -= had;
            while left > 0 {
                let n = match tokio::time::timeout(STALL, io.read(tmp)).await {
                    Ok(Ok(n)) if n > 0 => n,
                    _ => return Ok(false),
                };
                // What is past the body is the next request's.
                let body = (n as u64).min(left);
                if (n as u64) > body {
                    buf.extend_from_slice(tmp.get(body as usize..n).unwrap_or_default());
                }
                left -= body;
            }
            io.write_all(reply("200 OK", BIN, 0, close).as_bytes())
                .await?;
        }
        Route::MethodNotAllowed => {
            io.write_all(reply("405 Method Not Allowed", "text/plain", 0, close).as_bytes())
                .await?;
        }
        Route::NotFound => {
            io.write_all(reply("404 Not Found", "text/plain", 0, close).as_bytes())
                .await?;
        }
    }
    Ok(!close)
}
