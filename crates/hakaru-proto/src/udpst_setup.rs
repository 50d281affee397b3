//! The client's side of the setup exchange: the request it builds and the response it reads.

#[allow(clippy::wildcard_imports)]
use super::*;

/// What a client asks for in its setup request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupParams {
    /// The protocol version to offer ([`PROTOCOL_VER`]).
    pub version: u16,
    /// Random non-zero multi-connection identifier.
    pub mc_ident: u16,
    /// Required bandwidth (Mbit/s, 0 none).
    pub max_bandwidth: u16,
    /// The bandwidth is for upstream.
    pub upstream: bool,
    /// Modifier bitmap ([`MOD_JUMBO`], [`MOD_TRADITIONAL`]).
    pub modifiers: u8,
}

impl SetupParams {
    /// The setup request of one connection (index 0 of 1), no authentication.
    pub fn encode(&self) -> [u8; SETUP_LEN] {
        let mut b = [0u8; SETUP_LEN];
        put16(&mut b, 0, SETUP_ID);
        put16(&mut b, 2, self.version);
        put8(&mut b, 4, 0);
        put8(&mut b, 5, 1);
        put16(&mut b, 6, self.mc_ident);
        put8(&mut b, 8, CREQ_SETUP);
        let mut bw = self.max_bandwidth & !USDIR_BIT;
        if self.upstream && bw > 0 {
            bw |= USDIR_BIT;
        }
        put16(&mut b, 10, bw);
        put8(&mut b, 14, self.modifiers);
        b
    }
}

/// A setup response, as the client reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupResponse {
    /// The server's version (its own when it refused ours).
    pub version: u16,
    /// Response code (1 accepted; see [`SetupCode`]).
    pub code: u8,
    /// The test port to activate the test on.
    pub test_port: u16,
}

impl SetupResponse {
    /// Reads a setup response (a setup request or anything else is an error).
    pub fn parse(b: &[u8]) -> Result<Self, UdpstError> {
        const W: &str = "setup response";
        check(W, b, SETUP_LEN, SETUP_ID, 54)?;
        let cmd = u8_at(b, 8);
        if cmd != CRSP_SETUP {
            return Err(UdpstError::Field {
                what: W,
                field: "command",
                value: cmd.into(),
            });
        }
        Ok(SetupResponse {
            version: u16_at(b, 2),
            code: u8_at(b, 9),
            test_port: u16_at(b, 12),
        })
    }

    /// The reason of a refusal in words (the reference's wording), `None` when accepted.
    pub fn refusal(&self) -> Option<String> {
        let why = match self.code {
            1 => return None,
            2 => format!(
                "protocol version {PROTOCOL_VER} not accepted by the server (it speaks {})",
                self.version
            ),
            3 => "the jumbo datagram size option does not match the server".into(),
            4 => "authentication is not configured on the server".into(),
            5 => "the server requires authentication".into(),
            6 => "the authentication method does not match the server".into(),
            7 => "authentication failed at the server".into(),
            8 => "authentication time outside the server's window".into(),
            9 => "the server requires a max bandwidth option".into(),
            10 => "the required max bandwidth exceeds the server's available capacity".into(),
            11 => "the traditional MTU option does not match the server".into(),
            12 => "the server rejected the multi-connection parameters".into(),
            13 => "the server could not allocate a connection".into(),
            c => format!("unexpected setup response code {c}"),
        };
        Some(why)
    }
}
