//! Tests waiting for their data connections, found by token.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::mpsc::Sender;
use std::sync::Mutex;

/// A data connection for a test: its flow id and socket.
pub type DataConn = (u32, TcpStream);

/// Maps test tokens to the channel their session collects data connections from.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<HashMap<String, Sender<DataConn>>>,
}

impl Registry {
    /// Registers a test's token.
    pub fn insert(&self, token: String, tx: Sender<DataConn>) {
        if let Ok(mut m) = self.inner.lock() {
            m.insert(token, tx);
        }
    }

    /// Removes a token (the test ended or never started).
    pub fn remove(&self, token: &str) {
        if let Ok(mut m) = self.inner.lock() {
            m.remove(token);
        }
    }

    /// Hands a data connection to its test; gives it back if no test has that token.
    pub fn deliver(&self, token: &str, conn: DataConn) -> Result<(), DataConn> {
        let tx = self.inner.lock().ok().and_then(|m| m.get(token).cloned());
        match tx {
            Some(tx) => tx.send(conn).map_err(|e| e.0),
            None => Err(conn),
        }
    }
}
