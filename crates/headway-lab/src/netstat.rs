//! The kernel's TCP counters of a namespace: `/proc/net/snmp` and `/proc/net/netstat`, parsed.
//!
//! Both files are pairs of lines — a header line `Tcp: RtoAlgorithm RtoMin …` and a value line
//! `Tcp: 1 200 …` — per protocol group. [`Counters::parse`] reads any number of such files
//! concatenated and keys each value as `Group.Name` (`Tcp.RetransSegs`,
//! `TcpExt.SyncookiesSent`); [`Counters::since`] subtracts an earlier reading. Pure, so it is
//! unit-tested on text; [`read`] runs `cat` in a namespace (the counters are per network
//! namespace, and `/proc/net` shows the reader's).

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

/// Counter values by `Group.Name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters(pub BTreeMap<String, u64>);

impl Counters {
    /// Parses `/proc/net/snmp`- and `/proc/net/netstat`-style text. Lines that do not pair up
    /// (a header without its value line, different lengths) are an error; values that are not
    /// unsigned numbers (`Tcp: MaxConn -1`) are skipped.
    pub fn parse(text: &str) -> Result<Counters> {
        let mut out = BTreeMap::new();
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        while let Some(header) = lines.next() {
            let Some(values) = lines.next() else {
                bail!("a counter header without its values: {header:?}");
            };
            let (group, names) = header
                .split_once(':')
                .with_context(|| format!("not a counter header: {header:?}"))?;
            let (vgroup, vals) = values
                .split_once(':')
                .with_context(|| format!("not a counter line: {values:?}"))?;
            if group != vgroup {
                bail!("counter header {group:?} followed by values of {vgroup:?}");
            }
            let names: Vec<&str> = names.split_whitespace().collect();
            let vals: Vec<&str> = vals.split_whitespace().collect();
            if names.len() != vals.len() {
                bail!("{group}: {} names but {} values", names.len(), vals.len());
            }
            for (n, v) in names.iter().zip(vals) {
                if let Ok(v) = v.parse::<u64>() {
                    out.insert(format!("{group}.{n}"), v);
                }
            }
        }
        Ok(Counters(out))
    }

    /// The value of `key` (`"TcpExt.SyncookiesSent"`), 0 when absent.
    pub fn get(&self, key: &str) -> u64 {
        self.0.get(key).copied().unwrap_or(0)
    }

    /// Each counter's increase since `earlier` (a counter that went down counts 0).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(earlier.get(k))))
                .collect(),
        )
    }
}

/// Reads `/proc/net/snmp` and `/proc/net/netstat` in namespace `ns`.
pub fn read(ns: &str) -> Result<Counters> {
    let out = crate::netns::exec(ns, &["cat", "/proc/net/snmp", "/proc/net/netstat"])?;
    if !out.status.success() {
        bail!(
            "reading the TCP counters of {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Counters::parse(&String::from_utf8_lossy(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
Ip: Forwarding DefaultTTL
Ip: 2 64
Tcp: RtoAlgorithm RtoMin MaxConn RetransSegs
Tcp: 1 200 -1 17
TcpExt: SyncookiesSent SyncookiesRecv SyncookiesFailed ListenOverflows ListenDrops
TcpExt: 1000 12 3 0 5
";

    #[test]
    fn pairs_of_lines_become_named_counters() {
        let c = Counters::parse(SAMPLE).unwrap();
        assert_eq!(c.get("Tcp.RetransSegs"), 17);
        assert_eq!(c.get("TcpExt.SyncookiesSent"), 1000);
        assert_eq!(c.get("TcpExt.ListenDrops"), 5);
        assert_eq!(c.get("Ip.Forwarding"), 2);
        // -1 is not a counter; an absent name reads 0.
        assert!(!c.0.contains_key("Tcp.MaxConn"));
        assert_eq!(c.get("TcpExt.Nothing"), 0);
    }

    #[test]
    fn differences_are_per_counter_and_never_negative() {
        let before = Counters::parse(SAMPLE).unwrap();
        let after = Counters::parse(&SAMPLE.replace("1000 12 3 0 5", "1500 20 3 0 4")).unwrap();
        let d = after.since(&before);
        assert_eq!(d.get("TcpExt.SyncookiesSent"), 500);
        assert_eq!(d.get("TcpExt.SyncookiesRecv"), 8);
        assert_eq!(d.get("TcpExt.SyncookiesFailed"), 0);
        assert_eq!(d.get("TcpExt.ListenDrops"), 0);
    }

    #[test]
    fn malformed_text_is_an_error() {
        assert!(Counters::parse("Tcp: A B\n").is_err());
        assert!(Counters::parse("Tcp: A B\nTcp: 1\n").is_err());
        assert!(Counters::parse("Tcp: A\nUdp: 1\n").is_err());
        assert!(Counters::parse("no colon\nhere\n").is_err());
        assert_eq!(Counters::parse("").unwrap(), Counters::default());
    }
}
