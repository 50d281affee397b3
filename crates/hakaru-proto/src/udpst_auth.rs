//! RFC 9946 authentication (mode 1, "authenticated control"), as OB-UDPST 9.0.0 does it for
//! protocol version 20: a shared key (at most 64 characters, chosen by key ID from a key file
//! or given alone) and the request's timestamp derive a client key and a server key (KBKDF in
//! counter mode with HMAC-SHA256: label "UDPSTP", context the timestamp in decimal, 512 bits);
//! each control PDU carries an HMAC-SHA256 over the whole PDU, computed with the digest and the
//! checksum zeroed, under the client key (requests) or the server key (responses and the null
//! request). docs/protocol-notes.md has the byte offsets.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Authentication mode 1: the control PDUs carry a digest.
pub const MODE_CONTROL: u8 = 1;
/// Longest shared key the reference accepts.
pub const MAX_KEY_LEN: usize = 64;
/// How far (s) a request's timestamp may be from this host's clock.
pub const TIME_WINDOW_S: i64 = 5;
/// Length of each derived key and of the digest.
pub const KEY_LEN: usize = 32;

/// Where the authentication fields sit in a PDU: the offset of its authentication-mode byte
/// (the time, digest, key ID and checksum follow it at fixed distances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthAt(pub usize);

/// The setup request and response.
pub const SETUP: AuthAt = AuthAt(15);
/// The null request.
pub const NULL: AuthAt = AuthAt(7);
/// The test activation request and response.
pub const ACTIVATION: AuthAt = AuthAt(63);

impl AuthAt {
    fn time(self) -> usize {
        self.0 + 1
    }
    fn digest(self) -> std::ops::Range<usize> {
        self.0 + 5..self.0 + 5 + KEY_LEN
    }
    fn key_id(self) -> usize {
        self.0 + 5 + KEY_LEN
    }
    fn checksum(self) -> std::ops::Range<usize> {
        self.0 + 7 + KEY_LEN..self.0 + 9 + KEY_LEN
    }
    /// Whether a PDU of `len` bytes holds these fields.
    fn fits(self, len: usize) -> bool {
        self.checksum().end <= len
    }
}

/// The keys one test uses, derived from the shared key and the setup request's timestamp.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    /// Signs the client's requests.
    pub client: [u8; KEY_LEN],
    /// Signs the server's responses.
    pub server: [u8; KEY_LEN],
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length: new_from_slice cannot fail for it.
    <HmacSha256 as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

/// The client and server keys from the shared key and a timestamp (seconds since 1970).
pub fn derive(shared: &[u8], unix_time: u32) -> Keys {
    let context = unix_time.to_string();
    let mut out = [0u8; 2 * KEY_LEN];
    for (i, block) in out.chunks_mut(KEY_LEN).enumerate() {
        let mut m = mac(shared);
        m.update(&(i as u32 + 1).to_be_bytes());
        m.update(b"UDPSTP");
        m.update(&[0]);
        m.update(context.as_bytes());
        m.update(&((2 * KEY_LEN * 8) as u32).to_be_bytes());
        block.copy_from_slice(&m.finalize().into_bytes());
    }
    let mut k = Keys {
        client: [0; KEY_LEN],
        server: [0; KEY_LEN],
    };
    k.client.copy_from_slice(&out[..KEY_LEN]);
    k.server.copy_from_slice(&out[KEY_LEN..]);
    k
}

/// The timestamp and key ID a PDU carries (`None` when it is too short).
pub fn stamp(pdu: &[u8], at: AuthAt) -> Option<(u32, u8)> {
    if !at.fits(pdu.len()) {
        return None;
    }
    let t: [u8; 4] = pdu.get(at.time()..at.time() + 4)?.try_into().ok()?;
    Some((u32::from_be_bytes(t), *pdu.get(at.key_id())?))
}

/// Writes the fields of a signed PDU but the digest (zeroed), or `None` when too short.
fn prepare(pdu: &mut [u8], at: AuthAt, key_id: u8, unix_time: u32) -> Option<()> {
    if !at.fits(pdu.len()) {
        return None;
    }
    *pdu.get_mut(at.0)? = MODE_CONTROL;
    pdu.get_mut(at.time()..at.time() + 4)?
        .copy_from_slice(&unix_time.to_be_bytes());
    pdu.get_mut(at.digest())?.fill(0);
    *pdu.get_mut(at.key_id())? = key_id;
    *pdu.get_mut(at.key_id() + 1)? = 0;
    pdu.get_mut(at.checksum())?.fill(0);
    Some(())
}

/// Writes mode 1, the timestamp, the key ID and the digest under `key` into `pdu` (the
/// checksum is left zero). A PDU too short for the fields is left as it is.
pub fn sign(pdu: &mut [u8], at: AuthAt, key: &[u8; KEY_LEN], key_id: u8, unix_time: u32) {
    if prepare(pdu, at, key_id, unix_time).is_none() {
        return;
    }
    let mut m = mac(key);
    m.update(pdu);
    let d = m.finalize().into_bytes();
    if let Some(field) = pdu.get_mut(at.digest()) {
        field.copy_from_slice(&d);
    }
}

/// Whether `pdu` carries a valid digest under `key` (compared in constant time).
pub fn verify(pdu: &[u8], at: AuthAt, key: &[u8; KEY_LEN]) -> bool {
    if !at.fits(pdu.len()) || pdu.get(at.0) != Some(&MODE_CONTROL) {
        return false;
    }
    let mut copy = pdu.to_vec();
    let Some(digest) = copy.get(at.digest()).map(<[u8]>::to_vec) else {
        return false;
    };
    if let Some(f) = copy.get_mut(at.digest()) {
        f.fill(0);
    }
    if let Some(f) = copy.get_mut(at.checksum()) {
        f.fill(0);
    }
    let mut m = mac(key);
    m.update(&copy);
    m.verify_slice(&digest).is_ok()
}

/// Clears the authentication fields (mode 0), as a response to an unsigned request carries.
pub fn clear(pdu: &mut [u8], at: AuthAt) {
    if prepare(pdu, at, 0, 0).is_some() {
        if let Some(m) = pdu.get_mut(at.0) {
            *m = 0;
        }
    }
}

/// Why a key file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    /// A line that is not `ID,KEY`.
    #[error("line {line}: expected `KEYID,KEY` (KEYID 0-255, KEY 1-64 characters)")]
    Line { line: usize },
    /// No key at all.
    #[error("no keys in the file")]
    Empty,
}

/// Reads a key file in the reference's format: `KEYID,KEY` a line, `#` starts a comment,
/// spaces, tabs and commas are ignored.
pub fn parse_key_file(text: &str) -> Result<Vec<(u8, String)>, KeyFileError> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let mut fields = line.split([',', ' ', '\t']).filter(|f| !f.is_empty());
        let (Some(id), key) = (fields.next(), fields.next()) else {
            continue;
        };
        let bad = KeyFileError::Line { line: n + 1 };
        let id: u8 = id.parse().map_err(|_| bad.clone())?;
        let key = key.ok_or(bad.clone())?;
        if key.len() > MAX_KEY_LEN || fields.next().is_some() {
            return Err(bad);
        }
        keys.push((id, key.to_string()));
    }
    if keys.is_empty() {
        return Err(KeyFileError::Empty);
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivation_matches_openssl_kbkdf() {
        // `openssl kdf -keylen 64 -kdfopt mac:HMAC -kdfopt digest:SHA256 -kdfopt key:firstkey
        //  -kdfopt salt:UDPSTP -kdfopt info:1764626400 KBKDF` (OpenSSL 3.0.19).
        let k = derive(b"firstkey", 1_764_626_400);
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02X}")).collect::<String>();
        assert_eq!(
            hex(&k.client),
            "73C2010C39913517E3418C598B20BFFAC9494AB69838ADEE2FD3DF2B873DE954"
        );
        assert_eq!(
            hex(&k.server),
            "DDBEB056E8886B9959C8F31F5D8E5DBA683FAC7D289436569D07A0A9058DAB5C"
        );
    }

    #[test]
    fn a_signed_pdu_verifies_and_any_change_breaks_it() {
        let k = derive(b"key", 1000);
        for (at, len) in [(SETUP, 56), (NULL, 48), (ACTIVATION, 104)] {
            let mut pdu = vec![0x5Au8; len];
            sign(&mut pdu, at, &k.client, 3, 1000);
            assert!(verify(&pdu, at, &k.client));
            assert!(!verify(&pdu, at, &k.server), "the other key must fail");
            assert_eq!(stamp(&pdu, at), Some((1000, 3)));
            // The checksum is outside the digest; every other byte is inside it.
            for i in 0..len {
                if at.checksum().contains(&i) {
                    continue;
                }
                let mut bad = pdu.clone();
                bad[i] ^= 1;
                assert!(!verify(&bad, at, &k.client), "byte {i} of {len} changed");
            }
        }
    }

    #[test]
    fn short_or_unsigned_pdus_are_refused_without_panicking() {
        let k = derive(b"key", 1);
        assert!(!verify(&[], SETUP, &k.client));
        assert!(!verify(&[1; 20], ACTIVATION, &k.client));
        assert!(!verify(&[0; 56], SETUP, &k.client), "mode 0 is not signed");
        assert_eq!(stamp(&[0; 10], SETUP), None);
        let mut short = [0u8; 10];
        sign(&mut short, SETUP, &k.client, 0, 1);
        assert_eq!(short, [0u8; 10]);
    }

    #[test]
    fn key_files_read_as_the_reference_writes_them() {
        let text = "# comment\n0,legacykey\t# Legacy\n 1 , firstkey \n\n255,x\n";
        assert_eq!(
            parse_key_file(text).unwrap(),
            vec![
                (0, "legacykey".to_string()),
                (1, "firstkey".to_string()),
                (255, "x".to_string())
            ]
        );
        assert_eq!(
            parse_key_file("256,k\n"),
            Err(KeyFileError::Line { line: 1 })
        );
        assert_eq!(parse_key_file("7\n"), Err(KeyFileError::Line { line: 1 }));
        let long = format!("1,{}", "k".repeat(65));
        assert_eq!(parse_key_file(&long), Err(KeyFileError::Line { line: 1 }));
        assert_eq!(parse_key_file("# nothing\n"), Err(KeyFileError::Empty));
    }
}
