//! The results document as serde reads it: only the keys hakaru uses, each judged by the
//! reader rather than by serde, so a key of the wrong type gives the same words as a missing
//! one, and nothing else is ever built (serde skips unknown keys and values of a wrong type).

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::StreamResult;

/// A JSON number as read, or why there is none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) enum Num {
    /// The key is missing.
    #[default]
    Missing,
    /// A negative integer.
    Int(i64),
    /// A non-negative integer.
    UInt(u64),
    /// A number with a fraction or an exponent, or out of 64-bit range.
    Float(f64),
    /// Something else (null, a string, an array, an object, a boolean).
    Other,
}

impl Num {
    /// The number in a JSON value.
    pub(super) fn of(v: &Value) -> Num {
        match v {
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => Num::UInt(u),
                (_, Some(i), _) => Num::Int(i),
                (_, _, Some(f)) => Num::Float(f),
                _ => Num::Other,
            },
            _ => Num::Other,
        }
    }

    /// As a float, any number.
    pub(super) fn f64(self) -> Option<f64> {
        match self {
            Num::Int(i) => Some(i as f64),
            Num::UInt(u) => Some(u as f64),
            Num::Float(f) => Some(f),
            Num::Missing | Num::Other => None,
        }
    }

    /// As an integer; a u64 over `i64::MAX` is 3.12's rendering of a negative one.
    pub(super) fn int(self) -> Option<i64> {
        match self {
            Num::Int(i) => Some(i),
            Num::UInt(u) => Some(u as i64),
            // The u64 rendering of a small negative number, rounded through a double.
            Num::Float(f) if f >= 9.223_372_036_854_776e18 => {
                Some((f - 18_446_744_073_709_551_616.0) as i64)
            }
            Num::Float(f) => f.is_finite().then_some(f as i64),
            Num::Missing | Num::Other => None,
        }
    }
}

/// A value read from any JSON type: what it takes through its own methods, the rest
/// skipped without being built and read as [`Lenient::other`].
trait Lenient<'de>: Sized {
    /// What a JSON value this type does not take reads as.
    fn other() -> Self;

    fn num(_: Num) -> Self {
        Self::other()
    }

    fn text(_: &str) -> Self {
        Self::other()
    }

    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::other())
    }

    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::other())
    }
}

struct LenientVisitor<T>(PhantomData<T>);

impl<'de, T: Lenient<'de>> Visitor<'de> for LenientVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Ok(T::num(if v < 0 {
            Num::Int(v)
        } else {
            Num::UInt(v as u64)
        }))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Ok(T::num(Num::UInt(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Ok(T::num(Num::Float(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Ok(T::text(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
}

/// Implements `Deserialize` through [`Lenient`].
macro_rules! lenient_deserialize {
    ($($ty:ident $(<$t:ident>)?),*) => {$(
        impl<'de $(, $t: Deserialize<'de>)?> Deserialize<'de> for $ty $(<$t>)? {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(LenientVisitor(PhantomData))
            }
        }
    )*};
}

lenient_deserialize!(Num, Text, Object<T>, Streams);

impl Lenient<'_> for Num {
    fn other() -> Num {
        Num::Other
    }

    fn num(n: Num) -> Num {
        n
    }
}

/// A string, or `None` for anything else.
#[derive(Debug, Default)]
pub(super) struct Text(pub(super) Option<String>);

impl Lenient<'_> for Text {
    fn other() -> Text {
        Text(None)
    }

    fn text(s: &str) -> Text {
        Text(Some(s.to_string()))
    }
}

/// A JSON object read as `T`, or `None` for anything else (serde would otherwise take an
/// array for a struct, field by field).
#[derive(Debug)]
pub(super) struct Object<T>(pub(super) Option<T>);

impl<'de, T: Deserialize<'de>> Lenient<'de> for Object<T> {
    fn other() -> Object<T> {
        Object(None)
    }

    fn map<A: MapAccess<'de>>(map: A) -> Result<Object<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(|t| Object(Some(t)))
    }
}

/// The top level of a results document.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Results {
    #[serde(default)]
    pub(super) cpu_util_total: Num,
    #[serde(default)]
    pub(super) cpu_util_user: Num,
    #[serde(default)]
    pub(super) cpu_util_system: Num,
    #[serde(default)]
    pub(super) sender_has_retransmits: Num,
    #[serde(default)]
    pub(super) congestion_used: Text,
    #[serde(default)]
    pub(super) streams: Streams,
}

/// One stream's line.
#[derive(Debug, serde::Deserialize)]
struct Stream {
    #[serde(default)]
    id: Num,
    #[serde(default)]
    bytes: Num,
    #[serde(default)]
    retransmits: Num,
    #[serde(default)]
    jitter: Num,
    #[serde(default)]
    errors: Num,
    #[serde(default)]
    packets: Num,
    #[serde(default)]
    omitted_errors: Num,
    #[serde(default)]
    omitted_packets: Num,
    #[serde(default)]
    start_time: Num,
    #[serde(default)]
    end_time: Num,
}

impl Stream {
    /// The line checked: the figures every iperf3 writes must be numbers.
    fn checked(self) -> Result<StreamResult, String> {
        let missing = |k: &str| format!("\"{k}\" missing or not a number");
        let int = |n: Num, k: &str| n.int().ok_or_else(|| missing(k));
        Ok(StreamResult {
            id: int(self.id, "id")?,
            bytes: int(self.bytes, "bytes")?.max(0) as u64,
            retransmits: int(self.retransmits, "retransmits")?,
            jitter: self.jitter.f64().ok_or_else(|| missing("jitter"))?,
            errors: int(self.errors, "errors")?,
            packets: int(self.packets, "packets")?,
            omitted_errors: self.omitted_errors.int(),
            omitted_packets: self.omitted_packets.int(),
            start_time: self.start_time.f64().unwrap_or(0.0),
            end_time: self.end_time.f64().unwrap_or(0.0),
        })
    }
}

/// The `streams` array: `None` when missing or not an array; otherwise the lines, or the
/// first bad line's words (the lines after it are skipped, not kept).
#[derive(Debug, Default)]
pub(super) struct Streams(pub(super) Option<Result<Vec<StreamResult>, String>>);

impl<'de> Lenient<'de> for Streams {
    fn other() -> Streams {
        Streams(None)
    }

    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Streams, A::Error> {
        let mut lines = Vec::new();
        while let Some(Object(s)) = seq.next_element::<Object<Stream>>()? {
            match s
                .ok_or_else(|| "a stream is not an object".to_string())
                .and_then(Stream::checked)
            {
                Ok(line) => lines.push(line),
                Err(why) => {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    return Ok(Streams(Some(Err(why))));
                }
            }
        }
        Ok(Streams(Some(Ok(lines))))
    }
}
