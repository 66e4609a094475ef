//! The contract between the admin API and whatever runs the links ([`LinkControl`]), and the
//! JSON shapes of links on the wire ([`LinkViewJson`], [`SetLinkRequest`]).

use headway_config::{LinkSpec, LinkSpecInput};
use headway_link::Params;
use serde::{Deserialize, Serialize};

/// What the admin API needs from the process that runs the emulated links. The binary
/// implements it over its running links; tests implement it in memory.
///
/// Calls come from the admin server's async tasks and must not block for long (take a lock,
/// copy, return). The admin API serialises its own read-modify-write sequences for `PUT`, so
/// two concurrent `PUT`s never lose each other's changes.
pub trait LinkControl: Send + Sync + 'static {
    /// The names of all links, in a stable order.
    fn names(&self) -> Vec<String>;

    /// The current state of link `name`, or `None` if there is no such link.
    fn get(&self, name: &str) -> Option<LinkView>;

    /// Replaces the parameters of the directions given (`None` leaves a direction as it is).
    /// The parameters have been validated. Either every given direction is changed or, on
    /// `Err` (with a message for the API client), none is.
    fn set(&self, name: &str, a_to_b: Option<Params>, b_to_a: Option<Params>)
        -> Result<(), String>;
}

/// The state of one link as [`LinkControl`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkView {
    /// The link's name.
    pub name: String,
    /// First interface.
    pub a: String,
    /// Second interface.
    pub b: String,
    /// Current parameters of the a→b direction.
    pub a_to_b: Params,
    /// Current parameters of the b→a direction.
    pub b_to_a: Params,
    /// Counters, shown as they are. By convention an object with one object per direction,
    /// `{"a_to_b": {"passed": n, "lost": n, "overflow": n, …}, "b_to_a": {…}}`; `headway ctl`
    /// shows `passed`, `lost` and `overflow` from there when present.
    pub stats: serde_json::Value,
}

/// A link as the admin API shows it: the parameters as full [`LinkSpec`]s (every key present).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkViewJson {
    /// The link's name.
    pub name: String,
    /// First interface.
    pub a: String,
    /// Second interface.
    pub b: String,
    /// Current parameters of the a→b direction.
    pub a_to_b: LinkSpec,
    /// Current parameters of the b→a direction.
    pub b_to_a: LinkSpec,
    /// Counters; see [`LinkView::stats`].
    #[serde(default)]
    pub stats: serde_json::Value,
}

impl From<&LinkView> for LinkViewJson {
    fn from(v: &LinkView) -> Self {
        LinkViewJson {
            name: v.name.clone(),
            a: v.a.clone(),
            b: v.b.clone(),
            a_to_b: LinkSpec::from(&v.a_to_b),
            b_to_a: LinkSpec::from(&v.b_to_a),
            stats: v.stats.clone(),
        }
    }
}

/// The body of `PUT /api/v1/links/{name}`. Each spec is text (`"delay=20ms loss=1%"`) or an
/// object of the same keys, and applies over the link's current parameters; `both` applies to
/// both directions, and a direction's own spec wins over `both` for the keys it names. At least
/// one must be given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetLinkRequest {
    /// Spec for both directions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub both: Option<LinkSpecInput>,
    /// Spec for the a→b direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a_to_b: Option<LinkSpecInput>,
    /// Spec for the b→a direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_to_a: Option<LinkSpecInput>,
}
