//! The configuration a responsiveness server publishes at `/.well-known/nq` (the draft's
//! "Responsiveness Test Server Discovery"): a JSON object with `version` 1 and the three URLs,
//! all on one host, and an optional `test_endpoint` to connect to instead of that host.
//! Sans-IO: bytes in, a checked [`NqConfig`] or an error naming the problem out.
//!
//! The URLs have two sets of names: the ones Apple's networkQuality, goresponsiveness and
//! Cloudflare's mach read (`small_https_download_url`, `large_https_download_url`,
//! `https_upload_url`) and the draft's (`small_download_url`, `large_download_url`,
//! `upload_url`). The server publishes both, as Apple's servers do; the client reads either,
//! the `https_` names first.

use serde_json::Value;

/// Largest configuration document accepted.
pub const MAX_CONFIG: usize = 64 << 10;

/// A parsed URL: what the client needs to connect and to form requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `https` or `http`.
    pub tls: bool,
    /// Host as written (a name, an IPv4 address or a bracketless IPv6 address).
    pub host: String,
    /// Port (443 or 80 when the URL has none).
    pub port: u16,
    /// Path and query, at least `/`.
    pub path: String,
}

impl Target {
    /// Parses an `http://` or `https://` URL.
    pub fn parse(url: &str) -> Result<Target, String> {
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!(
                "'{url}': the URL must start with https:// or http://"
            ));
        };
        let (hostport, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        let path = path.split('#').next().unwrap_or("/");
        let default = if tls { 443 } else { 80 };
        let (host, port) = if let Some(r) = hostport.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| format!("'{url}': an IPv6 address without ']'"))?;
            let host = r.get(..end).unwrap_or_default();
            let after = r.get(end + 1..).unwrap_or_default();
            (host, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() || host.contains('@') {
            return Err(format!(
                "'{url}': no host (or user info, which is not accepted)"
            ));
        }
        let port = match port {
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("'{url}': the port '{p}' is not 1 to 65535"))?,
            None => default,
        };
        Ok(Target {
            tls,
            host: host.to_string(),
            port,
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
        })
    }

    /// `host:port` as a URL writes it (IPv6 in brackets).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URL again, normalised.
    pub fn url(&self) -> String {
        format!(
            "{}://{}{}",
            if self.tls { "https" } else { "http" },
            self.authority(),
            self.path
        )
    }
}

/// A checked configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NqConfig {
    /// The object to download for load (GET).
    pub large: Target,
    /// The 1-byte object of the probes (GET).
    pub small: Target,
    /// Where uploads go (POST).
    pub upload: Target,
    /// The host to connect to instead of the URLs' host, when given.
    pub test_endpoint: Option<String>,
}

/// Parses and checks a configuration document as the draft requires: `version` 1, the three
/// URLs present once each with one host, `test_endpoint` optional; unknown names ignored.
pub fn parse(body: &[u8]) -> Result<NqConfig, String> {
    if body.len() > MAX_CONFIG {
        return Err(format!(
            "the configuration is {} bytes, more than the {MAX_CONFIG} accepted",
            body.len()
        ));
    }
    // serde_json keeps the last of duplicate names; the draft says a duplicate makes the
    // document invalid, so count the names first.
    for name in [
        "\"version\"",
        "\"large_download_url\"",
        "\"small_download_url\"",
        "\"upload_url\"",
        "\"large_https_download_url\"",
        "\"small_https_download_url\"",
        "\"https_upload_url\"",
        "\"test_endpoint\"",
    ] {
        let text = String::from_utf8_lossy(body);
        if text.matches(name).count() > 1 {
            return Err(format!("the configuration names {name} more than once"));
        }
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the configuration is not JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("the configuration is not a JSON object")?;
    match obj.get("version").and_then(Value::as_u64) {
        Some(1) => {}
        Some(n) => {
            return Err(format!(
                "configuration version {n}; only version 1 is known"
            ))
        }
        None => return Err("the configuration has no numeric \"version\"".into()),
    }
    let urls = obj
        .get("urls")
        .and_then(Value::as_object)
        .ok_or("the configuration has no \"urls\" object")?;
    // The vendors' name, else the draft's.
    let url = |vendor: &str, draft: &str| -> Result<Target, String> {
        let (name, s) = [vendor, draft]
            .into_iter()
            .find_map(|n| Some((n, urls.get(n)?.as_str()?)))
            .ok_or_else(|| format!("the configuration has no \"{vendor}\" (or \"{draft}\")"))?;
        Target::parse(s).map_err(|e| format!("{name}: {e}"))
    };
    let (large, small, upload) = (
        url("large_https_download_url", "large_download_url")?,
        url("small_https_download_url", "small_download_url")?,
        url("https_upload_url", "upload_url")?,
    );
    if large.host != small.host || large.host != upload.host {
        return Err(format!(
            "the three URLs must have one host, got {}, {} and {}",
            large.host, small.host, upload.host
        ));
    }
    let test_endpoint = match obj.get("test_endpoint") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err("\"test_endpoint\" must be a host name".into()),
    };
    Ok(NqConfig {
        large,
        small,
        upload,
        test_endpoint,
    })
}

/// The configuration a server at `base` (`https://host:port`) publishes for its own paths,
/// under both sets of names.
pub fn document(base: &str) -> String {
    let (large, small, upload) = (
        format!("{base}/large"),
        format!("{base}/small"),
        format!("{base}/upload"),
    );
    serde_json::json!({
        "version": 1,
        "urls": {
            "small_https_download_url": small,
            "large_https_download_url": large,
            "https_upload_url": upload,
            "small_download_url": small,
            "large_download_url": large,
            "upload_url": upload,
        }
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_defaults_ports_and_ipv6() {
        let t = Target::parse("https://example.com/large").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.path.as_str()),
            (true, "example.com", 443, "/large")
        );
        let t = Target::parse("http://[::1]:8080").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.path.as_str()),
            (false, "::1", 8080, "/")
        );
        assert_eq!(t.authority(), "[::1]:8080");
        assert_eq!(Target::parse("https://h:443/x#frag").unwrap().path, "/x");
        for bad in [
            "ftp://x/",
            "https:///x",
            "https://h:0/",
            "https://h:99999/",
            "https://u@h/",
            "https://[::1/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_drafts_example_parses_and_unknown_names_are_ignored() {
        let doc = br#"{"version": 1, "extra": [1,2],
            "urls": {"large_download_url": "https://www.example.com/large",
                     "small_download_url": "https://www.example.com/small",
                     "upload_url": "https://www.example.com/upload"},
            "test_endpoint": "rpm.example.net"}"#;
        let c = parse(doc).unwrap();
        assert_eq!(c.large.path, "/large");
        assert_eq!(c.small.path, "/small");
        assert_eq!(c.upload.path, "/upload");
        assert_eq!(c.test_endpoint.as_deref(), Some("rpm.example.net"));
        let own = parse(document("https://127.0.0.1:4443").as_bytes()).unwrap();
        assert_eq!(own.small.url(), "https://127.0.0.1:4443/small");
        assert_eq!(own.test_endpoint, None);
    }

    #[test]
    fn the_vendors_names_are_published_and_read_before_the_drafts() {
        let doc: Value = serde_json::from_str(&document("https://h:1")).unwrap();
        let urls = &doc["urls"];
        for (vendor, draft, path) in [
            ("small_https_download_url", "small_download_url", "/small"),
            ("large_https_download_url", "large_download_url", "/large"),
            ("https_upload_url", "upload_url", "/upload"),
        ] {
            assert_eq!(urls[vendor], format!("https://h:1{path}"), "{doc}");
            assert_eq!(urls[draft], urls[vendor], "{doc}");
        }
        // What networkQuality's and goresponsiveness's servers publish alone.
        let vendor = br#"{"version": 1, "urls": {
            "small_https_download_url": "https://v.example/api/v1/small",
            "large_https_download_url": "https://v.example/api/v1/large",
            "https_upload_url": "https://v.example/api/v1/slurp"}}"#;
        let c = parse(vendor).unwrap();
        assert_eq!(c.upload.path, "/api/v1/slurp");
        assert_eq!(c.small.path, "/api/v1/small");
        // Both: the vendors' names win.
        let both = br#"{"version": 1, "urls": {
            "small_https_download_url": "https://v/s", "small_download_url": "https://v/old-s",
            "large_https_download_url": "https://v/l", "large_download_url": "https://v/old-l",
            "https_upload_url": "https://v/u", "upload_url": "https://v/old-u"}}"#;
        let c = parse(both).unwrap();
        assert_eq!(
            (c.small.path.as_str(), c.upload.path.as_str()),
            ("/s", "/u")
        );
        let dup = br#"{"version": 1, "urls": {"https_upload_url": "https://v/u", "https_upload_url": "https://v/u",
            "small_https_download_url": "https://v/s", "large_https_download_url": "https://v/l"}}"#;
        assert!(parse(dup).unwrap_err().contains("more than once"));
    }

    #[test]
    fn invalid_documents_are_refused_by_name() {
        let urls = r#""urls": {"large_download_url": "https://a/l", "small_download_url": "https://a/s", "upload_url": "https://a/u"}"#;
        let cases = [
            (format!("{{\"version\": 2, {urls}}}"), "version 2"),
            (format!("{{{urls}}}"), "\"version\""),
            (format!("{{\"version\": 1, \"version\": 1, {urls}}}"), "more than once"),
            ("{\"version\": 1}".to_string(), "\"urls\""),
            (
                "{\"version\": 1, \"urls\": {\"large_download_url\": \"https://a/l\", \"small_download_url\": \"https://a/s\"}}".to_string(),
                "upload_url",
            ),
            (
                "{\"version\": 1, \"urls\": {\"large_download_url\": \"https://a/l\", \"small_download_url\": \"https://b/s\", \"upload_url\": \"https://a/u\"}}".to_string(),
                "one host",
            ),
            ("[1]".to_string(), "not a JSON object"),
            ("{".to_string(), "not JSON"),
            (format!("{{\"version\": 1, \"test_endpoint\": 5, {urls}}}"), "test_endpoint"),
        ];
        for (doc, want) in cases {
            let e = parse(doc.as_bytes()).unwrap_err();
            assert!(e.contains(want), "{doc}: {e}");
        }
        assert!(parse(&vec![b' '; MAX_CONFIG + 1])
            .unwrap_err()
            .contains("more than"));
    }
}
