//! `--netperf` on the client subcommands (tcp, udp, pps, latency, connect): the flag and
//! where its tests go.

use super::common::{run_and_print, Endpoint, Target};
use hakaru_model::TestSpec;

/// `--netperf`: on the subcommands a stock netserver can run (tcp, udp, pps, latency,
/// connect).
#[derive(Debug, Clone, clap::Args)]
pub struct NetperfPeer {
    /// The server is a stock netserver (netperf 2.6 or 2.7; -p defaults to its 12865): run the
    /// test as netperf tests (tcp: TCP_STREAM, with -R TCP_MAERTS; udp and pps: UDP_STREAM;
    /// latency: TCP_RR, with --udp UDP_RR; connect: TCP_CRR), one per flow (-P), each on a
    /// control connection of its own. The data moves through hakaru's engine; the server
    /// figures come from netserver's results, so live intervals show this end only. What
    /// netperf cannot ask of netserver (-O, --bidir, -R over UDP, ...) is refused by name.
    #[arg(long)]
    pub netperf: bool,
    /// With --netperf: the passphrase of a netserver started with `-Z WORD`, sent before each
    /// test as netperf's `-Z` does (in plaintext, as netperf's protocol has it).
    #[arg(long, value_name = "WORD", requires = "netperf")]
    pub netperf_passphrase: Option<String>,
}

impl NetperfPeer {
    /// Hands the flags to the target the subcommand runs.
    pub fn apply(&self, t: &mut Target) {
        t.netperf = self.netperf;
        t.netperf_passphrase = self.netperf_passphrase.clone();
    }
}

impl Target {
    /// `--netperf`: HOST (loopback without one) at netserver's control port (12865 unless -p
    /// or HOST:PORT gives one).
    /// `--sync-start` holds the tests after their control connections are open and before
    /// they are asked for (netserver starts its timer when it answers).
    pub fn run_netperf(&self, spec: TestSpec) -> anyhow::Result<()> {
        let opts = self.options(&self.netperf_endpoint()?, spec);
        run_and_print(self, &opts, self.sync_start)
    }

    /// Where `--netperf` tests go.
    pub fn netperf_endpoint(&self) -> anyhow::Result<Endpoint> {
        let given = self.host_port()?;
        let host = given
            .as_ref()
            .map_or_else(|| self.loopback().to_string(), |(h, _)| h.clone());
        let port = match (self.port_given(), given) {
            (true, Some((_, p))) => p,
            (true, None) => self.port.unwrap_or(hakaru_client::NETPERF_DEFAULT_PORT),
            (false, _) => hakaru_client::NETPERF_DEFAULT_PORT,
        };
        Ok(Endpoint::remote(host, port))
    }
}
