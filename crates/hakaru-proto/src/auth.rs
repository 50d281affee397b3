//! Pre-shared key authentication of the native control connection: a mutual
//! challenge-response with HMAC-SHA256, so the key never crosses the wire and each side
//! proves it holds the key over a nonce the other chose.
//!
//! 1. The client's `hello` carries its nonce.
//! 2. A server with a key answers with a `welcome` that carries its own nonce (`auth`).
//! 3. The client sends `auth` with HMAC(key, "hakaru-psk-v1 client" | server nonce | client
//!    nonce); the server checks it in constant time. A wrong proof gets "authentication
//!    failed" after a fixed delay, and the connection ends.
//! 4. The server sends `auth_ok` with HMAC(key, "hakaru-psk-v1 server" | client nonce |
//!    server nonce); the client checks it, so a server that does not hold the key cannot
//!    pass itself off as one that does.
//!
//! The labels keep one side's proof from ever being valid as the other's. The control and
//! data connections are not encrypted: the key protects who may run tests, not the contents.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a nonce (hex on the wire: twice as many characters).
pub const NONCE_LEN: usize = 32;
/// Shortest key accepted, in bytes: shorter secrets are guessable from one captured exchange.
pub const MIN_KEY_LEN: usize = 16;
/// Longest key accepted (a key file is read whole).
pub const MAX_KEY_LEN: usize = 4096;

const CLIENT_LABEL: &[u8] = b"hakaru-psk-v1 client";
const SERVER_LABEL: &[u8] = b"hakaru-psk-v1 server";

/// A pre-shared key.
#[derive(Clone)]
pub struct Psk(Vec<u8>);

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        write!(f, "Psk({} bytes)", self.0.len())
    }
}

impl Psk {
    /// A key from the text of a key file or of HAKARU_PSK: surrounding whitespace (the
    /// file's final newline) is not part of it. `source` names where it came from in errors.
    pub fn from_text(text: &str, source: &str) -> Result<Psk, String> {
        let k = text.trim();
        if k.len() < MIN_KEY_LEN {
            return Err(format!(
                "{source}: the key has {} bytes; at least {MIN_KEY_LEN} are needed (e.g. `head -c 32 /dev/urandom | base64`)",
                k.len()
            ));
        }
        if k.len() > MAX_KEY_LEN {
            return Err(format!(
                "{source}: the key has {} bytes; at most {MAX_KEY_LEN} are accepted",
                k.len()
            ));
        }
        Ok(Psk(k.as_bytes().to_vec()))
    }

    fn mac(&self, label: &[u8], a: &[u8], b: &[u8]) -> HmacSha256 {
        // HMAC takes keys of any length.
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        m.update(label);
        m.update(&[0]);
        m.update(a);
        m.update(&[0]);
        m.update(b);
        m
    }

    /// The client's proof, hex.
    pub fn client_proof(&self, server_nonce: &str, client_nonce: &str) -> String {
        let m = self.mac(
            CLIENT_LABEL,
            server_nonce.as_bytes(),
            client_nonce.as_bytes(),
        );
        hex(&m.finalize().into_bytes())
    }

    /// The server's proof, hex.
    pub fn server_proof(&self, client_nonce: &str, server_nonce: &str) -> String {
        let m = self.mac(
            SERVER_LABEL,
            client_nonce.as_bytes(),
            server_nonce.as_bytes(),
        );
        hex(&m.finalize().into_bytes())
    }

    /// Checks a client's proof in constant time.
    pub fn verify_client(&self, server_nonce: &str, client_nonce: &str, proof: &str) -> bool {
        let Some(p) = unhex(proof) else { return false };
        self.mac(
            CLIENT_LABEL,
            server_nonce.as_bytes(),
            client_nonce.as_bytes(),
        )
        .verify_slice(&p)
        .is_ok()
    }

    /// A tag over `data` under `label` (a datagram's authentication: `label` keeps one kind
    /// of datagram from passing as another), the whole HMAC-SHA256.
    pub fn tag(&self, label: &[u8], data: &[u8]) -> [u8; 32] {
        self.mac(label, data, &[]).finalize().into_bytes().into()
    }

    /// Checks a datagram's tag in constant time.
    pub fn verify_tag(&self, label: &[u8], data: &[u8], tag: &[u8]) -> bool {
        self.mac(label, data, &[]).verify_slice(tag).is_ok()
    }

    /// Checks a server's proof in constant time.
    pub fn verify_server(&self, client_nonce: &str, server_nonce: &str, proof: &str) -> bool {
        let Some(p) = unhex(proof) else { return false };
        self.mac(
            SERVER_LABEL,
            client_nonce.as_bytes(),
            server_nonce.as_bytes(),
        )
        .verify_slice(&p)
        .is_ok()
    }
}

/// True when `s` is a nonce as sent: [`NONCE_LEN`] bytes in lowercase hex.
pub fn is_nonce(s: &str) -> bool {
    s.len() == NONCE_LEN * 2
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 256 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SN: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const CN: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    fn key(s: &str) -> Psk {
        Psk::from_text(s, "test").unwrap()
    }

    #[test]
    fn both_proofs_check_with_the_same_key_only() {
        let k = key("correct horse battery staple\n");
        let other = key("correct horse battery stapler");
        let cp = k.client_proof(SN, CN);
        assert!(k.verify_client(SN, CN, &cp));
        assert!(!other.verify_client(SN, CN, &cp));
        let sp = k.server_proof(CN, SN);
        assert!(k.verify_server(CN, SN, &sp));
        assert!(!other.verify_server(CN, SN, &sp));
        // Nonces are bound: swapping or replaying them fails.
        assert!(!k.verify_client(CN, SN, &cp));
        assert!(!k.verify_client(SN, SN, &cp));
    }

    #[test]
    fn one_sides_proof_is_never_the_others() {
        let k = key("0123456789abcdef0123");
        // Same nonce order both ways: the labels still differ.
        assert_ne!(k.client_proof(SN, CN), k.server_proof(SN, CN));
        assert!(!k.verify_server(SN, CN, &k.client_proof(SN, CN)));
    }

    #[test]
    fn known_answer() {
        // HMAC-SHA256 over the documented layout, so other implementations can interoperate.
        let k = key("0123456789abcdef");
        let mut m = <HmacSha256 as Mac>::new_from_slice(b"0123456789abcdef").unwrap();
        m.update(b"hakaru-psk-v1 client\0");
        m.update(SN.as_bytes());
        m.update(b"\0");
        m.update(CN.as_bytes());
        assert_eq!(k.client_proof(SN, CN), hex(&m.finalize().into_bytes()));
        assert_eq!(k.client_proof(SN, CN).len(), 64);
    }

    #[test]
    fn bad_keys_proofs_and_nonces_are_refused() {
        let e = Psk::from_text("  short \n", "--psk-file k").unwrap_err();
        assert!(e.contains("--psk-file k: the key has 5 bytes"), "{e}");
        assert!(Psk::from_text(&"x".repeat(5000), "HAKARU_PSK").is_err());
        let k = key("0123456789abcdef");
        for bad in ["", "zz", "abc", &"0".repeat(1000), "éé"] {
            assert!(!k.verify_client(SN, CN, bad), "{bad}");
        }
        assert!(is_nonce(SN));
        assert!(!is_nonce("00"));
        assert!(!is_nonce(&SN.to_uppercase()));
        assert!(format!("{k:?}").contains("16 bytes"));
        assert!(!format!("{k:?}").contains("0123"));
    }
}
