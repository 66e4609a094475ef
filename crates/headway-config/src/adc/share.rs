//! Canary rules: a rule's `share = "10%"` holds for that share of the clients, each client on
//! the same side every time. Pure; the proxy asks [`Share::holds`] with the client's address.

/// A share of the clients (a rule's `share`): which side a client falls on depends only on its
/// address and the rule's name, so it is the same on every request, every worker and every
/// restart, and two rules of different names split the clients independently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// The share, in hundredths of a per cent (1–10,000).
    pub basis_points: u16,
    /// Mixed into each client's hash: the rule's name's.
    pub salt: u64,
}

impl Share {
    /// `basis_points` of the clients, for the rule named `rule`.
    pub fn new(basis_points: u16, rule: &str) -> Share {
        Share {
            basis_points,
            salt: fnv1a(0xcbf2_9ce4_8422_2325, rule.as_bytes()),
        }
    }

    /// Whether `client` is in the share.
    pub fn holds(&self, client: std::net::IpAddr) -> bool {
        // An IPv4 client on an IPv6 socket is the same client.
        let h = match headway_core::net::unmapped(client) {
            std::net::IpAddr::V4(a) => fnv1a(self.salt, &a.octets()),
            std::net::IpAddr::V6(a) => fnv1a(self.salt, &a.octets()),
        };
        // FNV's low bits mix poorly: finish with splitmix64's.
        (headway_core::rng::mix64(h) % 10_000) < u64::from(self.basis_points)
    }
}

/// FNV-1a over `bytes`, from `state`.
fn fnv1a(mut state: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        state ^= u64::from(*b);
        state = state.wrapping_mul(0x0000_0100_0000_01b3);
    }
    state
}

/// Parses a share, `"10%"` or `"0.5%"`: its basis points (1–10,000).
pub(crate) fn parse_share(text: &str) -> Result<u16, String> {
    let t = text.trim();
    let bad =
        || format!("share `{text}` is not a percentage from 0.01% to 100%: write e.g. \"10%\"");
    let number = t.strip_suffix('%').ok_or_else(bad)?.trim();
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty()
        || frac.len() > 2
        || !(whole.chars().chain(frac.chars())).all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    let whole: u32 = whole.parse().map_err(|_| bad())?;
    let frac: u32 = format!("{frac:0<2}").parse().map_err(|_| bad())?;
    let bp = whole
        .checked_mul(100)
        .and_then(|w| w.checked_add(frac))
        .ok_or_else(bad)?;
    if !(1..=10_000).contains(&bp) {
        return Err(bad());
    }
    Ok(bp as u16)
}
