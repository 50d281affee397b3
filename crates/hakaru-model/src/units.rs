//! Unit newtypes: sizes in bytes, rates in bits per second, durations.
//!
//! Sizes use binary multipliers (`K` = 1024), as iperf3, ttcp and netperf do for buffer
//! lengths; rates use decimal multipliers (`M` = 10^6 bit/s), as every link speed does.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Error from parsing a unit string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} '{input}': {reason}")]
pub struct UnitError {
    /// What kind of value was being parsed ("size", "rate", "duration").
    pub what: &'static str,
    /// The text that failed to parse.
    pub input: String,
    /// Why it failed, including what is expected.
    pub reason: String,
}

fn split_number(s: &str) -> (&str, &str) {
    let idx = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..idx], &s[idx..])
}

fn parse_number(what: &'static str, input: &str, num: &str) -> Result<f64, UnitError> {
    let value: f64 = num.parse().map_err(|_| UnitError {
        what,
        input: input.to_string(),
        reason: "expected a number followed by an optional unit".into(),
    })?;
    if !value.is_finite() || value < 0.0 {
        return Err(UnitError {
            what,
            input: input.to_string(),
            reason: "must be a non-negative number".into(),
        });
    }
    Ok(value)
}

/// A size in bytes. Parses `1048576`, `128K`, `1M`, `1MiB`, `4G`, `1.5M` (binary multipliers).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl FromStr for Bytes {
    type Err = UnitError;
    fn from_str(input: &str) -> Result<Self, UnitError> {
        let s = input.trim();
        let (num, unit) = split_number(s);
        let value = parse_number("size", input, num)?;
        let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kb" | "kib" => 1024.0,
            "m" | "mb" | "mib" => 1024.0 * 1024.0,
            "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
            "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => {
                return Err(UnitError {
                    what: "size",
                    input: input.to_string(),
                    reason: format!("unknown unit '{}' (expected K, M, G or T)", unit.trim()),
                })
            }
        };
        let bytes = value * mult;
        if bytes > u64::MAX as f64 {
            return Err(UnitError {
                what: "size",
                input: input.to_string(),
                reason: "too large".into(),
            });
        }
        Ok(Bytes(bytes.round() as u64))
    }
}

impl fmt::Display for Bytes {
    /// Prints with a binary unit and three significant figures: `1.00 MiB`, `5.83 GiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut i = 0;
        while v >= 1024.0 && i < UNITS.len() - 1 {
            v /= 1024.0;
            i += 1;
        }
        if i == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{} {}", three_sig(v), UNITS[i])
        }
    }
}

fn three_sig(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A rate in bits per second. Parses `100m`, `10G`, `1.5Mbps`, `800kbit` (decimal multipliers).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BitRate(pub f64);

impl BitRate {
    /// Rate of `bytes` moved in `seconds`; zero when no time has passed.
    pub fn from_bytes(bytes: u64, seconds: f64) -> Self {
        if seconds <= 0.0 {
            BitRate(0.0)
        } else {
            BitRate(bytes as f64 * 8.0 / seconds)
        }
    }
}

impl FromStr for BitRate {
    type Err = UnitError;
    fn from_str(input: &str) -> Result<Self, UnitError> {
        let s = input.trim();
        let (num, unit) = split_number(s);
        let value = parse_number("rate", input, num)?;
        let typed = unit.trim();
        let unit = typed.to_ascii_lowercase();
        let unit = unit
            .strip_suffix("bps")
            .or_else(|| unit.strip_suffix("bit/s"))
            .or_else(|| unit.strip_suffix("bits"))
            .or_else(|| unit.strip_suffix("bit"))
            .unwrap_or(&unit);
        let mult = match unit {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            "g" => 1e9,
            "t" => 1e12,
            _ => {
                return Err(UnitError {
                    what: "rate",
                    input: input.to_string(),
                    reason: format!("unknown unit '{typed}' (expected k, M, G or T, bits/s)"),
                })
            }
        };
        Ok(BitRate(value * mult))
    }
}

impl fmt::Display for BitRate {
    /// Prints with a decimal unit: `941 Mbit/s`, `51.2 Gbit/s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"];
        let mut v = self.0;
        let mut i = 0;
        while v >= 1000.0 && i < UNITS.len() - 1 {
            v /= 1000.0;
            i += 1;
        }
        write!(f, "{} {}", three_sig(v), UNITS[i])
    }
}

/// A duration. Parses `10` (seconds), `10s`, `500ms`, `250us`, `1.5s`, `2m`, `100ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Dur(pub Duration);

impl Dur {
    /// The duration in seconds as a float.
    pub fn secs_f64(&self) -> f64 {
        self.0.as_secs_f64()
    }
    /// A duration of whole seconds.
    pub fn from_secs(s: u64) -> Self {
        Dur(Duration::from_secs(s))
    }
    /// True for a zero duration.
    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }
}

impl FromStr for Dur {
    type Err = UnitError;
    fn from_str(input: &str) -> Result<Self, UnitError> {
        let s = input.trim();
        let (num, unit) = split_number(s);
        let value = parse_number("duration", input, num)?;
        let mult = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "s" | "sec" | "secs" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => {
                return Err(UnitError {
                    what: "duration",
                    input: input.to_string(),
                    reason: format!(
                        "unknown unit '{}' (expected s, ms, us, ns, m or h)",
                        unit.trim()
                    ),
                })
            }
        };
        let secs = value * mult;
        if secs > 1e9 {
            return Err(UnitError {
                what: "duration",
                input: input.to_string(),
                reason: "too long".into(),
            });
        }
        Ok(Dur(Duration::from_secs_f64(secs)))
    }
}

impl fmt::Display for Dur {
    /// Prints in the largest unit that keeps the value readable: `10s`, `500ms`, `250us`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        if ns == 0 {
            write!(f, "0s")
        } else if ns.is_multiple_of(1_000_000_000) {
            write!(f, "{}s", ns / 1_000_000_000)
        } else if ns >= 1_000_000_000 {
            write!(f, "{}s", self.0.as_secs_f64())
        } else if ns.is_multiple_of(1_000_000) {
            write!(f, "{}ms", ns / 1_000_000)
        } else if ns.is_multiple_of(1_000) {
            write!(f, "{}us", ns / 1_000)
        } else {
            write!(f, "{ns}ns")
        }
    }
}

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs)
            .map(Dur)
            .map_err(|_| serde::de::Error::custom(format!("invalid duration {secs} s")))
    }
}

impl schemars::JsonSchema for Dur {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Seconds".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "number",
            "minimum": 0,
            "description": "A duration in seconds."
        })
    }
}

impl schemars::JsonSchema for Bytes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteCount".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "integer",
            "minimum": 0,
            "description": "A number of bytes."
        })
    }
}

impl schemars::JsonSchema for BitRate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "BitsPerSecond".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "number",
            "minimum": 0,
            "description": "A rate in bits per second."
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn unknown_units_are_echoed_as_typed() {
        let e = "12Q".parse::<Bytes>().unwrap_err().to_string();
        assert!(e.contains("'12Q'") && e.contains("unknown unit 'Q'"), "{e}");
        let e = "5Gbps2".parse::<BitRate>().unwrap_err().to_string();
        assert!(e.contains("'5Gbps2'"), "{e}");
        let e = "5X".parse::<Dur>().unwrap_err().to_string();
        assert!(e.contains("unknown unit 'X'"), "{e}");
    }

    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!("128K".parse::<Bytes>().unwrap(), Bytes(131072));
        assert_eq!("1M".parse::<Bytes>().unwrap(), Bytes(1 << 20));
        assert_eq!("1MiB".parse::<Bytes>().unwrap(), Bytes(1 << 20));
        assert_eq!("10G".parse::<Bytes>().unwrap(), Bytes(10 << 30));
        assert_eq!("1.5k".parse::<Bytes>().unwrap(), Bytes(1536));
        assert_eq!("1000".parse::<Bytes>().unwrap(), Bytes(1000));
        assert!("12Q".parse::<Bytes>().is_err());
        assert!("".parse::<Bytes>().is_err());
        assert!("-1".parse::<Bytes>().is_err());
        assert!("K".parse::<Bytes>().is_err());
    }

    #[test]
    fn sizes_display() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(1 << 20).to_string(), "1.00 MiB");
        assert_eq!(Bytes(5_830_000_000).to_string(), "5.43 GiB");
        assert_eq!(Bytes(150 << 20).to_string(), "150 MiB");
    }

    #[test]
    fn rates_parse_with_decimal_units() {
        assert_eq!("100m".parse::<BitRate>().unwrap(), BitRate(100e6));
        assert_eq!("10G".parse::<BitRate>().unwrap(), BitRate(10e9));
        assert_eq!("1.5Mbps".parse::<BitRate>().unwrap(), BitRate(1.5e6));
        assert_eq!("800kbit".parse::<BitRate>().unwrap(), BitRate(800e3));
        assert_eq!("0".parse::<BitRate>().unwrap(), BitRate(0.0));
        assert!("5x".parse::<BitRate>().is_err());
    }

    #[test]
    fn rates_display() {
        assert_eq!(BitRate(941e6).to_string(), "941 Mbit/s");
        assert_eq!(BitRate(51.23e9).to_string(), "51.2 Gbit/s");
        assert_eq!(BitRate(0.0).to_string(), "0.00 bit/s");
        assert_eq!(
            BitRate::from_bytes(125_000_000, 1.0).to_string(),
            "1.00 Gbit/s"
        );
        assert_eq!(BitRate::from_bytes(1, 0.0), BitRate(0.0));
    }

    #[test]
    fn durations_parse_and_display() {
        assert_eq!("10".parse::<Dur>().unwrap(), Dur::from_secs(10));
        assert_eq!("10s".parse::<Dur>().unwrap(), Dur::from_secs(10));
        assert_eq!(
            "500ms".parse::<Dur>().unwrap(),
            Dur(Duration::from_millis(500))
        );
        assert_eq!(
            "250us".parse::<Dur>().unwrap(),
            Dur(Duration::from_micros(250))
        );
        assert_eq!("2m".parse::<Dur>().unwrap(), Dur::from_secs(120));
        assert!("3 fortnights".parse::<Dur>().is_err());
        assert_eq!(Dur::from_secs(10).to_string(), "10s");
        assert_eq!(Dur(Duration::from_millis(500)).to_string(), "500ms");
        assert_eq!(Dur(Duration::from_micros(250)).to_string(), "250us");
        assert_eq!(Dur(Duration::from_millis(1500)).to_string(), "1.5s");
    }

    #[test]
    fn units_round_trip_through_display() {
        for s in ["1M", "4K", "3G"] {
            let b: Bytes = s.parse().unwrap();
            let shown = b.to_string().replace(' ', "").replace(".00", "");
            assert_eq!(shown.parse::<Bytes>().unwrap(), b);
        }
        for s in ["250us", "10s", "500ms"] {
            let d: Dur = s.parse().unwrap();
            assert_eq!(d.to_string().parse::<Dur>().unwrap(), d);
        }
    }
}
