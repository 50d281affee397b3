//! A result's per-kind part: [`KindDetail`], one variant per kind with figures of its own beside
//! the shared intervals, flows and totals of [`crate::RunResult`].
//!
//! In the JSON it stands in the result's own object (flattened), with the keys every document
//! has had: `latency`, `connect` and `raw` always (`null` unless they are the kind's), then
//! `http`, `probe`, `rpm` and `udpst` only when present. It is read back by which key is
//! present, so documents written before the enum (the archive keeps them) read as they did.

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{
    ConnectResult, HttpResult, LatencyResult, ProbeResult, RawResult, RpmResult, UdpstResult,
};

/// A kind's two accessors: its figures when the detail is that kind's, to read and to change.
macro_rules! accessors {
    ($($variant:ident, $get:ident, $get_mut:ident, $t:ty, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $get(&self) -> Option<&$t> {
            match self {
                KindDetail::$variant(x) => Some(x),
                _ => None,
            }
        }

        #[doc = $doc]
        /// To change them.
        pub fn $get_mut(&mut self) -> Option<&mut $t> {
            match self {
                KindDetail::$variant(x) => Some(x),
                _ => None,
            }
        }
    )*};
}

/// What one kind of test found beyond the shared intervals and totals.
#[derive(Debug, Clone, PartialEq)]
pub enum KindDetail {
    /// tcp, udp and pps: the intervals and totals say it all; with `--latency-probe`, the
    /// probes' figures too.
    Bulk {
        /// Latency probes of the bulk test (`--latency-probe`).
        probe: Option<Box<ProbeResult>>,
    },
    /// Round trips (`latency`, and netperf's and sockperf's request/response clients).
    Latency(Box<LatencyResult>),
    /// Connection rate (`connect`).
    Connect(Box<ConnectResult>),
    /// A plain stream or datagrams to or from any peer (`sink`, `source`).
    Raw(Box<RawResult>),
    /// HTTP transfers (`http`).
    Http(Box<HttpResult>),
    /// Responsiveness (`rpm`).
    Rpm(Box<RpmResult>),
    /// Maximum IP capacity (`capacity`, RFC 9946).
    Udpst(Box<UdpstResult>),
}

impl Default for KindDetail {
    /// A bulk test's, without probes: what a result starts as.
    fn default() -> KindDetail {
        KindDetail::Bulk { probe: None }
    }
}

impl KindDetail {
    /// A bulk test's detail, with its probes if it had any.
    pub fn bulk(probe: Option<ProbeResult>) -> KindDetail {
        KindDetail::Bulk {
            probe: probe.map(Box::new),
        }
    }

    accessors! {
        Latency, latency, latency_mut, LatencyResult, "The round-trip figures, for a latency test.";
        Connect, connect, connect_mut, ConnectResult, "The connection-rate figures, for a connect test.";
        Raw, raw, raw_mut, RawResult, "The raw transfer figures, for a sink or a source.";
        Http, http, http_mut, HttpResult, "The HTTP transfer figures.";
        Rpm, rpm, rpm_mut, RpmResult, "The responsiveness figures.";
        Udpst, udpst, udpst_mut, UdpstResult, "The capacity figures.";
    }

    /// A bulk test's latency probes.
    pub fn probe(&self) -> Option<&ProbeResult> {
        match self {
            KindDetail::Bulk { probe } => probe.as_deref(),
            _ => None,
        }
    }

    /// Whether the kind found figures of its own (a bulk test's are its intervals and totals,
    /// its probes only beside them).
    pub fn has_figures(&self) -> bool {
        match self {
            KindDetail::Bulk { .. } => false,
            KindDetail::Latency(_)
            | KindDetail::Connect(_)
            | KindDetail::Raw(_)
            | KindDetail::Http(_)
            | KindDetail::Rpm(_)
            | KindDetail::Udpst(_) => true,
        }
    }
}

impl Serialize for KindDetail {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("latency", &self.latency())?;
        m.serialize_entry("connect", &self.connect())?;
        m.serialize_entry("raw", &self.raw())?;
        if let Some(x) = self.http() {
            m.serialize_entry("http", x)?;
        }
        if let Some(x) = self.probe() {
            m.serialize_entry("probe", x)?;
        }
        if let Some(x) = self.rpm() {
            m.serialize_entry("rpm", x)?;
        }
        if let Some(x) = self.udpst() {
            m.serialize_entry("udpst", x)?;
        }
        m.end()
    }
}

/// The keys as the JSON has them: what is read, and what the schema describes. The fields and
/// their serde attributes are the old `RunResult` fields' as they were, so the schema derived
/// from them is unchanged (`skip_serializing_if` is read by the schema, not by serde here).
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(rename = "KindDetail")]
struct Keys {
    /// Round-trip figures, for latency tests.
    latency: Option<LatencyResult>,
    /// Connection-rate figures, for `connect` tests (`flows` and `totals` are then empty).
    connect: Option<ConnectResult>,
    /// Raw transfer figures, for `sink` and `source` runs.
    // Defaulted so results written before this field existed still decode.
    #[serde(default)]
    raw: Option<RawResult>,
    /// HTTP transfer figures, for `hakaru http` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    http: Option<HttpResult>,
    /// Latency probes of a bulk test (`--latency-probe`): idle baseline, under load, and
    /// the increase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    probe: Option<ProbeResult>,
    /// Responsiveness figures, for `hakaru rpm` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rpm: Option<RpmResult>,
    /// Maximum IP-layer capacity figures, for `hakaru capacity` runs (RFC 9946).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    udpst: Option<UdpstResult>,
}

impl<'de> Deserialize<'de> for KindDetail {
    /// The kind whose key is present (in the order written; a document carries one), else a
    /// bulk test's, with its probes if any.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KindDetail, D::Error> {
        let k = Keys::deserialize(d)?;
        Ok(if let Some(x) = k.latency {
            KindDetail::Latency(Box::new(x))
        } else if let Some(x) = k.connect {
            KindDetail::Connect(Box::new(x))
        } else if let Some(x) = k.raw {
            KindDetail::Raw(Box::new(x))
        } else if let Some(x) = k.http {
            KindDetail::Http(Box::new(x))
        } else if let Some(x) = k.rpm {
            KindDetail::Rpm(Box::new(x))
        } else if let Some(x) = k.udpst {
            KindDetail::Udpst(Box::new(x))
        } else {
            KindDetail::bulk(k.probe)
        })
    }
}

impl schemars::JsonSchema for KindDetail {
    fn schema_name() -> Cow<'static, str> {
        Keys::schema_name()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Keys::json_schema(g)
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_back_as_itself_with_the_nullable_keys_first() {
        let bulk = KindDetail::default();
        let s = serde_json::to_string(&bulk).unwrap();
        assert_eq!(s, r#"{"latency":null,"connect":null,"raw":null}"#);
        assert_eq!(serde_json::from_str::<KindDetail>(&s).unwrap(), bulk);
        let udpst = KindDetail::Udpst(Box::default());
        let s = serde_json::to_string(&udpst).unwrap();
        assert!(
            s.starts_with(r#"{"latency":null,"connect":null,"raw":null,"udpst":{"#),
            "{s}"
        );
        assert_eq!(serde_json::from_str::<KindDetail>(&s).unwrap(), udpst);
        assert!(udpst.has_figures() && !bulk.has_figures());
        assert!(udpst.udpst().is_some() && udpst.rpm().is_none());
    }
}
