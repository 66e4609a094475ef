//! The lab's view of an emulated link: both directions ([`LinkSetting`]) and [`Dir`].
//!
//! The link spec itself — its keys, text form and partial-update semantics — is
//! [`headway_config::LinkSpec`], the same type `headway emulate` and `headway ctl` parse; this
//! module does not define a spec of its own.
//!
//! The lab holds each direction as validated [`Params`] and writes it for the emulator as the
//! full spec `LinkSpec::from(&params)`. Since the emulator treats a spec as partial (keys not
//! named are kept), only a spec that names every key replaces what a previous one configured;
//! the full spec does. [`brief`] is the short form for people to read.
//!
//! Orientation: side `a` of every emulated link faces the client (or branch), side `b` the
//! server (or data centre); `a_to_b` is the upload direction, `b_to_a` the download direction.

use headway_config::LinkSpec;
use headway_link::{Params, ParamsError};

pub use headway_config::Dir;

/// Both directions of an emulated link. The default is transparent both ways
/// ([`Params::default`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkSetting {
    /// Client (a) → server (b): the upload direction.
    pub a_to_b: Params,
    /// Server (b) → client (a): the download direction.
    pub b_to_a: Params,
}

impl LinkSetting {
    /// The same parameters in both directions.
    pub fn symmetric(params: Params) -> Self {
        LinkSetting {
            a_to_b: params.clone(),
            b_to_a: params,
        }
    }

    /// Checks both directions with [`Params::validate`].
    pub fn validate(&self) -> Result<(), ParamsError> {
        self.a_to_b.validate()?;
        self.b_to_a.validate()
    }

    /// The `headway emulate` arguments that configure this setting: `--both SPEC` when both
    /// directions agree, else `--a-to-b SPEC --b-to-a SPEC`; each SPEC names every key.
    pub fn emulate_args(&self) -> Vec<String> {
        let full = |p: &Params| LinkSpec::from(p).to_string();
        if self.a_to_b == self.b_to_a {
            vec!["--both".into(), full(&self.a_to_b)]
        } else {
            vec![
                "--a-to-b".into(),
                full(&self.a_to_b),
                "--b-to-a".into(),
                full(&self.b_to_a),
            ]
        }
    }

    /// A one-line description: `SPEC` when symmetric, else `a→b: SPEC; b→a: SPEC`, each in
    /// [`brief`] form.
    pub fn describe(&self) -> String {
        if self.a_to_b == self.b_to_a {
            brief(&self.a_to_b)
        } else {
            format!("a→b: {}; b→a: {}", brief(&self.a_to_b), brief(&self.b_to_a))
        }
    }
}

/// The short form of `params` for people to read: the keys that differ from
/// [`Params::default`] (`rate=1.5mbit delay=150ms loss=1% queue=50`), which
/// `Params::try_from` reads back as `params`; `transparent` when nothing differs.
pub fn brief(params: &Params) -> String {
    let spec = LinkSpec::changes(&Params::default(), params);
    if spec.is_empty() {
        "transparent".into()
    } else {
        spec.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use headway_core::Probability;
    use headway_link::Loss;

    use super::*;

    fn delayed(ms: u64) -> Params {
        Params {
            delay: Duration::from_millis(ms),
            ..Params::default()
        }
    }

    #[test]
    fn emulate_args_name_every_key_so_a_set_replaces_the_previous_one() {
        let args = LinkSetting::default().emulate_args();
        assert_eq!(args[0], "--both");
        let spec: LinkSpec = args[1].parse().unwrap();
        assert_eq!(spec, LinkSpec::from(&Params::default()));
        // Every key is named: applied over any other setting, it restores the transparent link.
        assert_eq!(spec.apply(&delayed(100)), Ok(Params::default()));
    }

    #[test]
    fn emulate_args_use_both_only_when_symmetric() {
        let sym = LinkSetting::symmetric(delayed(5));
        assert_eq!(sym.emulate_args().len(), 2);
        let mut asym = sym.clone();
        asym.a_to_b.loss = Loss::Bernoulli(Probability::new(0.05).unwrap());
        let args = asym.emulate_args();
        assert_eq!(args[0], "--a-to-b");
        assert!(args[1].contains("loss=5%"), "{}", args[1]);
        assert_eq!(args[2], "--b-to-a");
        assert!(args[3].contains("loss=none"), "{}", args[3]);
        let back: Vec<Params> = [&args[1], &args[3]]
            .iter()
            .map(|t| Params::try_from(&t.parse::<LinkSpec>().unwrap()).unwrap())
            .collect();
        assert_eq!(back, [asym.a_to_b.clone(), asym.b_to_a.clone()]);
    }

    #[test]
    fn descriptions_are_brief() {
        assert_eq!(LinkSetting::default().describe(), "transparent");
        assert_eq!(LinkSetting::symmetric(delayed(5)).describe(), "delay=5ms");
        let asym = LinkSetting {
            a_to_b: delayed(5),
            b_to_a: Params::default(),
        };
        assert_eq!(asym.describe(), "a→b: delay=5ms; b→a: transparent");
    }

    #[test]
    fn validation_covers_both_directions() {
        let mut s = LinkSetting::default();
        assert!(s.validate().is_ok());
        s.b_to_a.mtu = 10;
        assert_eq!(s.validate(), Err(ParamsError::Mtu(10)));
    }
}
