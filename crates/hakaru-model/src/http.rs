//! HTTP transfers (`hakaru http`): what was asked and what each connection measured.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{FlowDir, SpecError};
use crate::units::{BitRate, Bytes, Dur};

/// Most connections one `hakaru http` opens.
pub const MAX_HTTP_CONNECTIONS: u32 = 1024;
/// Largest generated upload body.
pub const MAX_UPLOAD: u64 = 1 << 50;

/// The request method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// Download: the body comes to the client.
    Get,
    /// Upload with PUT: the client sends a generated body.
    Put,
    /// Upload with POST.
    Post,
}

impl HttpMethod {
    /// `GET`, `PUT` or `POST`.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Put => "PUT",
            HttpMethod::Post => "POST",
        }
    }

    /// Which way the body moves: down (server to client) for GET, up for uploads.
    pub fn dir(self) -> FlowDir {
        match self {
            HttpMethod::Get => FlowDir::Down,
            HttpMethod::Put | HttpMethod::Post => FlowDir::Up,
        }
    }
}

/// What `hakaru http` was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HttpSpec {
    /// The URLs, in the order given; connections take them in turn.
    pub urls: Vec<String>,
    /// GET, PUT or POST.
    pub method: HttpMethod,
    /// Connections at once (`-P`).
    pub parallel: u32,
    /// Repeat requests on each connection (keep-alive) until this time is up (`-t`).
    pub duration: Option<Dur>,
    /// Stop each connection after this many body bytes, repeating requests as needed (`-n`).
    pub bytes: Option<Bytes>,
    /// Body size of each PUT or POST (`--upload`).
    pub upload: Option<Bytes>,
    /// Split one URL's body into `parallel` byte ranges, one per connection (`--range`).
    pub range: bool,
    /// Extra request headers, `Name: value` (`-H`).
    pub headers: Vec<String>,
    /// Skip TLS certificate verification (`--insecure`).
    pub insecure: bool,
    /// PEM file of the certificate authorities to trust instead of the system's (`--cacert`).
    pub cacert: Option<String>,
    /// Redirects followed per request (`--max-redirects`).
    pub max_redirects: u32,
    /// Seconds between interval reports; 0 turns them off.
    pub interval: Dur,
    /// How long connecting (and the TLS handshake) may take.
    pub connect_timeout: Dur,
    /// Longest wait for any byte from the server before the request fails.
    pub stall_timeout: Dur,
    /// 4 or 6 to use only that address family (`-4`, `-6`).
    pub ip_version: Option<u8>,
}

impl HttpSpec {
    /// Checks every limit; messages name the flag.
    pub fn validate(&self) -> Result<(), SpecError> {
        let err = |m: String| Err(SpecError(m));
        if self.urls.is_empty() {
            return err("no URL to fetch".into());
        }
        if self.parallel == 0 || self.parallel > MAX_HTTP_CONNECTIONS {
            return err(format!(
                "-P/--parallel must be between 1 and {MAX_HTTP_CONNECTIONS}, got {}",
                self.parallel
            ));
        }
        if let Some(t) = self.duration {
            if t.is_zero() || t.secs_f64() > 86_400.0 {
                return err(format!(
                    "-t/--time must be more than 0 and at most 86400 s, got {t}"
                ));
            }
        }
        if self.bytes == Some(Bytes(0)) {
            return err("-n/--bytes must be more than 0".into());
        }
        if self.duration.is_some() && self.bytes.is_some() {
            return err("-t/--time and -n/--bytes cannot both be given".into());
        }
        match (self.method, self.upload) {
            (HttpMethod::Get, Some(_)) => return err("--upload needs --method PUT or POST".into()),
            (HttpMethod::Put | HttpMethod::Post, None) => {
                return err(format!(
                    "--method {} needs --upload SIZE (the body to send)",
                    self.method.as_str()
                ))
            }
            (_, Some(b)) if b.0 == 0 || b.0 > MAX_UPLOAD => {
                return err(format!(
                    "--upload must be more than 0 and at most 1P, got {}",
                    b.0
                ))
            }
            _ => {}
        }
        if self.range {
            if self.method != HttpMethod::Get {
                return err("--range splits a download; it cannot be used with --method".into());
            }
            if self.urls.len() != 1 {
                return err(format!(
                    "--range splits one URL over the connections; {} were given",
                    self.urls.len()
                ));
            }
            if self.duration.is_some() || self.bytes.is_some() {
                return err("--range fetches the file once; drop -t/-n".into());
            }
        }
        for h in &self.headers {
            let ok = h.split_once(':').is_some_and(|(k, _)| {
                !k.is_empty() && k.bytes().all(|b| b.is_ascii_graphic() && b != b':')
            });
            if !ok || h.contains(['\r', '\n']) {
                return err(format!("-H '{h}': expected 'Name: value'"));
            }
        }
        if self.max_redirects > 50 {
            return err(format!(
                "--max-redirects must be at most 50, got {}",
                self.max_redirects
            ));
        }
        if !self.interval.is_zero() && self.interval.secs_f64() < 0.01 {
            return err(format!(
                "-i/--interval must be 0 (off) or at least 10ms, got {}",
                self.interval
            ));
        }
        for (flag, d) in [
            ("--connect-timeout", self.connect_timeout),
            ("--stall-timeout", self.stall_timeout),
        ] {
            if d.is_zero() || d.secs_f64() > 3600.0 {
                return err(format!(
                    "{flag} must be more than 0 and at most 3600 s, got {d}"
                ));
            }
        }
        if let Some(v) = self.ip_version {
            if v != 4 && v != 6 {
                return err(format!("IP version must be 4 or 6, got {v}"));
            }
        }
        Ok(())
    }

    /// The headers as (name, value) pairs (validated by [`HttpSpec::validate`]).
    pub fn header_pairs(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .filter_map(|h| h.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    }

    /// The URLs connection `c` (0-based) fetches, in order: with at least as many URLs as
    /// connections, every `parallel`-th one; with fewer, one URL, in turn.
    pub fn urls_of(&self, c: u32) -> Vec<&str> {
        let (n, p) = (self.urls.len(), self.parallel.max(1) as usize);
        let c = c as usize;
        if n >= p {
            self.urls
                .iter()
                .skip(c)
                .step_by(p)
                .map(String::as_str)
                .collect()
        } else {
            vec![self.urls[c % n].as_str()]
        }
    }
}

/// Minimum, median, mean and maximum of a set of times, milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimeStats {
    /// How many times.
    pub count: u64,
    /// Shortest.
    pub min_ms: f64,
    /// Median.
    pub median_ms: f64,
    /// Mean.
    pub mean_ms: f64,
    /// Longest.
    pub max_ms: f64,
}

impl TimeStats {
    /// Statistics of `ms`; `None` when it is empty.
    pub fn of(ms: &[f64]) -> Option<TimeStats> {
        if ms.is_empty() {
            return None;
        }
        let mut v = ms.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(TimeStats {
            count: n as u64,
            min_ms: v[0],
            median_ms: median,
            mean_ms: v.iter().sum::<f64>() / n as f64,
            max_ms: v[n - 1],
        })
    }
}

/// What one connection measured (a connection that was reopened after the server closed it
/// keeps its id: it is one flow).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HttpConnection {
    /// Flow id (1-based), as in the intervals.
    pub id: u32,
    /// The URL of its last request.
    pub url: String,
    /// Server address it connected to (`ip:port`).
    pub peer: Option<String>,
    /// TLS version and cipher suite, for https.
    pub tls: Option<String>,
    /// Body bytes moved (received for GET, sent for uploads).
    pub bytes: u64,
    /// Seconds from its start to its last byte.
    pub seconds: f64,
    /// bytes x 8 / seconds.
    pub bits_per_second: BitRate,
    /// Requests sent.
    pub requests: u64,
    /// Requests that ended with a whole 2xx response.
    pub completed: u64,
    /// TCP connections opened (more than 1 when the server closed between requests).
    pub connects: u64,
    /// TCP connect times.
    pub connect_ms: Option<TimeStats>,
    /// TLS handshake times.
    pub tls_ms: Option<TimeStats>,
    /// Time to first byte: from the request's last byte sent (head, and body for uploads) to
    /// the response's first byte.
    pub ttfb_ms: Option<TimeStats>,
    /// Responses by status code.
    #[serde(deserialize_with = "status_codes")]
    #[schemars(with = "BTreeMap<u16, u64>")]
    pub status: BTreeMap<u16, u64>,
    /// Why its last failed request failed.
    pub error: Option<String>,
}

/// The result of a `hakaru http` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HttpResult {
    /// GET, PUT or POST.
    pub method: HttpMethod,
    /// `down` for GET (the client receives and counts), `up` for uploads (the client counts
    /// what it sent; the server's 2xx answer says it took the whole body).
    pub dir: FlowDir,
    /// Body bytes moved over all connections.
    pub bytes: u64,
    /// Seconds from the first connection's start to the last byte.
    pub seconds: f64,
    /// bytes x 8 / seconds: the goodput (bodies only; heads, TLS and TCP headers excluded).
    pub bits_per_second: BitRate,
    /// Requests sent.
    pub requests: u64,
    /// Requests that ended with a whole 2xx response.
    pub completed: u64,
    /// Requests that failed (a non-2xx status, a short body, a reset, a timeout).
    pub failed: u64,
    /// Responses by status code, over all connections.
    #[serde(deserialize_with = "status_codes")]
    #[schemars(with = "BTreeMap<u16, u64>")]
    pub status: BTreeMap<u16, u64>,
    /// Connect times over all connections.
    pub connect_ms: Option<TimeStats>,
    /// TLS handshake times.
    pub tls_ms: Option<TimeStats>,
    /// Times to first byte.
    pub ttfb_ms: Option<TimeStats>,
    /// Each connection.
    pub connections: Vec<HttpConnection>,
    /// Every distinct failure, with the connection and URL.
    pub errors: Vec<String>,
}

impl HttpResult {
    /// Sums `connections` into a result over `seconds`; the time lists feed the statistics.
    pub fn from_connections(
        method: HttpMethod,
        seconds: f64,
        connections: Vec<HttpConnection>,
        times: [&[f64]; 3],
        failed: u64,
        errors: Vec<String>,
    ) -> HttpResult {
        let bytes = connections.iter().map(|c| c.bytes).sum();
        let mut status = BTreeMap::new();
        for c in &connections {
            for (k, v) in &c.status {
                *status.entry(*k).or_insert(0) += v;
            }
        }
        HttpResult {
            method,
            dir: method.dir(),
            bytes,
            seconds,
            bits_per_second: BitRate::from_bytes(bytes, seconds),
            requests: connections.iter().map(|c| c.requests).sum(),
            completed: connections.iter().map(|c| c.completed).sum(),
            failed,
            status,
            connect_ms: TimeStats::of(times[0]),
            tls_ms: TimeStats::of(times[1]),
            ttfb_ms: TimeStats::of(times[2]),
            connections,
            errors,
        }
    }
}

impl crate::kind::Kind for HttpSpec {
    fn name(&self) -> &'static str {
        "http"
    }
    fn validate(&self) -> Result<(), SpecError> {
        HttpSpec::validate(self)
    }
    fn common(&self) -> crate::kind::Common<'_> {
        crate::kind::Common {
            flows: self.parallel,
            direction: if self.method == HttpMethod::Get {
                crate::Direction::Reverse
            } else {
                crate::Direction::Forward
            },
            amount: match (self.bytes, self.duration) {
                (Some(b), _) => crate::Amount::Bytes(b),
                (None, Some(t)) => crate::Amount::Time(t),
                // One pass over the URLs.
                (None, None) => crate::Amount::Time(Dur::default()),
            },
            interval: self.interval,
            stall_timeout: self.stall_timeout,
            length: self.upload.unwrap_or_default(),
            ..Default::default()
        }
    }
    fn remote(&self) -> bool {
        false
    }
}
/// Responses by status code, read from their JSON keys (strings). A result's per-kind part is
/// read through a flattened field, whose buffered keys stay strings that a `u16` key refuses;
/// each key is parsed here instead, and one that is not a status code names itself.
fn status_codes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<u16, u64>, D::Error> {
    let by_text = BTreeMap::<String, u64>::deserialize(d)?;
    by_text
        .into_iter()
        .map(|(k, n)| match k.parse::<u16>() {
            Ok(code) => Ok((code, n)),
            Err(_) => Err(serde::de::Error::custom(format!(
                "status code {k:?}: not a number from 0 to 65535"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_codes_read_as_numbers_and_a_bad_one_is_named() {
        #[derive(serde::Deserialize)]
        struct S {
            #[serde(deserialize_with = "super::status_codes")]
            status: std::collections::BTreeMap<u16, u64>,
        }
        let s: S = serde_json::from_str(r#"{"status":{"200":3,"404":1}}"#).unwrap();
        assert_eq!(
            s.status.into_iter().collect::<Vec<_>>(),
            [(200, 3), (404, 1)]
        );
        let e = serde_json::from_str::<S>(r#"{"status":{"OK":3}}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("status code \"OK\""), "{e}");
    }

    use super::*;

    fn spec() -> HttpSpec {
        HttpSpec {
            urls: vec!["http://h/".into()],
            method: HttpMethod::Get,
            parallel: 1,
            duration: None,
            bytes: None,
            upload: None,
            range: false,
            headers: vec![],
            insecure: false,
            cacert: None,
            max_redirects: 10,
            interval: Dur::from_secs(1),
            connect_timeout: Dur::from_secs(5),
            stall_timeout: Dur::from_secs(10),
            ip_version: None,
        }
    }

    #[test]
    fn limits_name_the_flag() {
        assert!(spec().validate().is_ok());
        type Change = fn(&mut HttpSpec);
        let cases: Vec<(Change, &str)> = vec![
            (|s| s.parallel = 0, "-P/--parallel"),
            (|s| s.parallel = 2000, "-P/--parallel"),
            (|s| s.upload = Some(Bytes(10)), "--upload needs --method"),
            (|s| s.method = HttpMethod::Put, "needs --upload"),
            (
                |s| {
                    s.duration = Some(Dur::from_secs(1));
                    s.bytes = Some(Bytes(1));
                },
                "-t/--time and -n/--bytes",
            ),
            (
                |s| {
                    s.range = true;
                    s.urls.push("http://g/".into());
                },
                "--range splits one URL",
            ),
            (|s| s.headers = vec!["NoColon".into()], "-H 'NoColon'"),
            (|s| s.headers = vec!["A: b\r\nX: y".into()], "-H"),
            (|s| s.urls.clear(), "no URL"),
            (
                |s| s.interval = Dur(std::time::Duration::from_millis(1)),
                "-i/--interval",
            ),
        ];
        for (change, want) in cases {
            let mut s = spec();
            change(&mut s);
            let e = s.validate().unwrap_err().0;
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }

    #[test]
    fn connections_take_urls_in_turn() {
        let mut s = spec();
        s.urls = vec!["a".into(), "b".into(), "c".into()];
        s.parallel = 2;
        assert_eq!(s.urls_of(0), ["a", "c"]);
        assert_eq!(s.urls_of(1), ["b"]);
        s.parallel = 4;
        assert_eq!(s.urls_of(3), ["a"]);
        assert_eq!(s.urls_of(1), ["b"]);
    }

    #[test]
    fn time_stats() {
        assert_eq!(TimeStats::of(&[]), None);
        let t = TimeStats::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(
            (t.min_ms, t.median_ms, t.mean_ms, t.max_ms),
            (1.0, 2.5, 2.5, 4.0)
        );
    }

    #[test]
    fn header_pairs_are_trimmed() {
        let mut s = spec();
        s.headers = vec!["X-A:  1 ".into(), "Host: h:2".into()];
        assert_eq!(
            s.header_pairs(),
            [("X-A".into(), "1".into()), ("Host".into(), "h:2".into())]
        );
    }
}
