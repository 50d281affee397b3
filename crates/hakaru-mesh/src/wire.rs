//! The mesh probe datagram, sans-IO (docs/mesh.md, "Wire").
//!
//! A probe and its reply are the same datagram, 48 bytes of header, an optional 32-byte tag
//! and zero padding up to the probe's size; the responder changes the type, adds its own id
//! and its own tag, and sends back exactly as many bytes as it got (never more: no
//! amplification). All fields are big-endian.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `HKMS` |
//! | 4 | version (1) |
//! | 5 | type: 1 probe, 2 reply |
//! | 6..8 | flags: bit 0 tagged |
//! | 8..16 | prober's instance id (random per agent start) |
//! | 16..24 | sequence number, per prober and peer |
//! | 24..32 | prober's send time, ns of its monotonic clock (echoed) |
//! | 32..40 | responder's instance id (0 in a probe) |
//! | 40..42 | datagram length |
//! | 42..48 | zero |
//! | 48..80 | with flag 0: HMAC-SHA256 of bytes 0..48 under the type's label |

use hakaru_proto::auth::Psk;

/// Header bytes.
pub const HEADER_LEN: usize = 48;
/// Tag bytes (when the agents share a key).
pub const TAG_LEN: usize = 32;
/// Largest probe: one IPv4 datagram on a 1500-byte path.
pub const MAX_LEN: usize = 1472;
const MAGIC: &[u8; 4] = b"HKMS";
const VERSION: u8 = 1;
const FLAG_TAGGED: u16 = 1;
const PROBE_LABEL: &[u8] = b"hakaru-mesh-v1 probe";
const REPLY_LABEL: &[u8] = b"hakaru-mesh-v1 reply";

/// Probe or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// Sent by a prober.
    Probe,
    /// Sent back by a responder.
    Reply,
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Probe or reply.
    pub kind: Type,
    /// The prober's instance id.
    pub prober: u64,
    /// Sequence number.
    pub seq: u64,
    /// The prober's send time (ns of its monotonic clock).
    pub sent_ns: u64,
    /// The responder's instance id (0 in a probe).
    pub responder: u64,
    /// Length of the whole datagram.
    pub len: u16,
    /// Whether it carries a tag.
    pub tagged: bool,
}

/// Why a datagram is not a mesh datagram, or not one to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the header (and tag).
    Short,
    /// Not `HKMS` version 1 with a known type.
    NotMesh,
    /// The length field is not the datagram's length.
    Length,
    /// No tag, or a wrong one, where the key requires one.
    Tag,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WireError::Short => "shorter than a mesh header",
            WireError::NotMesh => "not a mesh datagram (magic, version or type)",
            WireError::Length => "length field is not the datagram's length",
            WireError::Tag => "missing or wrong tag for the mesh key",
        })
    }
}

fn label(kind: Type) -> &'static [u8] {
    match kind {
        Type::Probe => PROBE_LABEL,
        Type::Reply => REPLY_LABEL,
    }
}

/// Smallest datagram with or without a key.
pub fn min_len(keyed: bool) -> usize {
    HEADER_LEN + if keyed { TAG_LEN } else { 0 }
}

impl Header {
    /// A probe of `len` bytes (at least [`min_len`], at most [`MAX_LEN`]; clamped).
    pub fn probe(prober: u64, seq: u64, sent_ns: u64, len: usize, keyed: bool) -> Header {
        Header {
            kind: Type::Probe,
            prober,
            seq,
            sent_ns,
            responder: 0,
            len: len.clamp(min_len(keyed), MAX_LEN) as u16,
            tagged: keyed,
        }
    }

    /// The reply to this probe from `responder`: the same length and echoed fields.
    pub fn reply(&self, responder: u64) -> Header {
        Header {
            kind: Type::Reply,
            responder,
            ..*self
        }
    }

    fn head_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = match self.kind {
            Type::Probe => 1,
            Type::Reply => 2,
        };
        let flags = if self.tagged { FLAG_TAGGED } else { 0 };
        b[6..8].copy_from_slice(&flags.to_be_bytes());
        b[8..16].copy_from_slice(&self.prober.to_be_bytes());
        b[16..24].copy_from_slice(&self.seq.to_be_bytes());
        b[24..32].copy_from_slice(&self.sent_ns.to_be_bytes());
        b[32..40].copy_from_slice(&self.responder.to_be_bytes());
        b[40..42].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Writes the datagram into `out` (cleared first): header, the tag when `key` is given
    /// and the header says tagged, zero padding to its length.
    pub fn encode(&self, key: Option<&Psk>, out: &mut Vec<u8>) {
        out.clear();
        let head = self.head_bytes();
        out.extend_from_slice(&head);
        if self.tagged {
            match key {
                Some(k) => out.extend_from_slice(&k.tag(label(self.kind), &head)),
                None => out.extend_from_slice(&[0u8; TAG_LEN]),
            }
        }
        out.resize(usize::from(self.len).max(out.len()), 0);
    }

    /// Reads a datagram. With `key`, only a datagram carrying the right tag passes
    /// (`WireError::Tag` otherwise); without one, a tag is not checked.
    pub fn decode(b: &[u8], key: Option<&Psk>) -> Result<Header, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Short);
        }
        if &b[..4] != MAGIC || b[4] != VERSION {
            return Err(WireError::NotMesh);
        }
        let kind = match b[5] {
            1 => Type::Probe,
            2 => Type::Reply,
            _ => return Err(WireError::NotMesh),
        };
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        let flags = u16::from_be_bytes([b[6], b[7]]);
        let len = u16::from_be_bytes([b[40], b[41]]);
        if usize::from(len) != b.len() {
            return Err(WireError::Length);
        }
        let tagged = flags & FLAG_TAGGED != 0;
        if tagged && b.len() < HEADER_LEN + TAG_LEN {
            return Err(WireError::Short);
        }
        if let Some(k) = key {
            let ok = tagged
                && k.verify_tag(
                    label(kind),
                    &b[..HEADER_LEN],
                    &b[HEADER_LEN..HEADER_LEN + TAG_LEN],
                );
            if !ok {
                return Err(WireError::Tag);
            }
        }
        Ok(Header {
            kind,
            prober: u64_at(8),
            seq: u64_at(16),
            sent_ns: u64_at(24),
            responder: u64_at(32),
            len,
            tagged,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Psk {
        Psk::from_text(s, "test").unwrap()
    }

    #[test]
    fn probe_and_reply_round_trip_at_their_length() {
        let p = Header::probe(7, 42, 123_456_789, 64, false);
        let mut b = Vec::new();
        p.encode(None, &mut b);
        assert_eq!(b.len(), 64);
        assert_eq!(Header::decode(&b, None).unwrap(), p);
        let r = p.reply(9);
        r.encode(None, &mut b);
        assert_eq!(b.len(), 64, "a reply is exactly as long as its probe");
        let d = Header::decode(&b, None).unwrap();
        assert_eq!(
            (d.kind, d.prober, d.seq, d.sent_ns, d.responder),
            (Type::Reply, 7, 42, 123_456_789, 9)
        );
    }

    #[test]
    fn lengths_are_clamped_and_checked() {
        assert_eq!(Header::probe(1, 1, 1, 0, false).len as usize, HEADER_LEN);
        assert_eq!(
            Header::probe(1, 1, 1, 0, true).len as usize,
            HEADER_LEN + TAG_LEN
        );
        assert_eq!(Header::probe(1, 1, 1, 65_000, false).len as usize, MAX_LEN);
        let mut b = Vec::new();
        Header::probe(1, 1, 1, 100, false).encode(None, &mut b);
        assert_eq!(Header::decode(&b[..99], None), Err(WireError::Length));
        assert_eq!(Header::decode(&b[..47], None), Err(WireError::Short));
        let mut bad = b.clone();
        bad[0] = b'X';
        assert_eq!(Header::decode(&bad, None), Err(WireError::NotMesh));
        bad = b.clone();
        bad[5] = 3;
        assert_eq!(Header::decode(&bad, None), Err(WireError::NotMesh));
    }

    #[test]
    fn a_key_admits_only_its_own_tags_and_labels() {
        let k = key("0123456789abcdef-mesh");
        let p = Header::probe(1, 2, 3, 80, true);
        let mut b = Vec::new();
        p.encode(Some(&k), &mut b);
        assert_eq!(Header::decode(&b, Some(&k)).unwrap(), p);
        // Another key, no tag, a flipped bit: refused.
        assert_eq!(
            Header::decode(&b, Some(&key("another-key-of-16+"))),
            Err(WireError::Tag)
        );
        let mut flipped = b.clone();
        flipped[20] ^= 1;
        assert_eq!(Header::decode(&flipped, Some(&k)), Err(WireError::Tag));
        let mut plain = Vec::new();
        Header::probe(1, 2, 3, 80, false).encode(None, &mut plain);
        assert_eq!(Header::decode(&plain, Some(&k)), Err(WireError::Tag));
        // A probe's tag does not pass as a reply's: the type is under the tag and the label.
        let mut as_reply = b.clone();
        as_reply[5] = 2;
        assert_eq!(Header::decode(&as_reply, Some(&k)), Err(WireError::Tag));
    }
}
