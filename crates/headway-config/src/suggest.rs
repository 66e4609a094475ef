//! "Did you mean …?" suggestions for misspelt keys.

/// The candidate closest to `word` by edit distance (ignoring ASCII case), if it is close enough
/// to be a plausible typo: at most a third of the longer word's length, and at least one edit.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (distance(&w, &c.to_ascii_lowercase()), *c))
        .filter(|(d, c)| *d <= w.chars().count().max(c.chars().count()).div_ceil(3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance in characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_typos_are_suggested_and_far_words_are_not() {
        let keys = &["rate", "delay", "jitter", "queue_bytes"];
        assert_eq!(did_you_mean("dely", keys), Some("delay"));
        assert_eq!(did_you_mean("dly", keys), Some("delay"));
        assert_eq!(did_you_mean("Delay", keys), Some("delay"));
        assert_eq!(did_you_mean("queue_byte", keys), Some("queue_bytes"));
        assert_eq!(did_you_mean("bandwidth", keys), None);
        assert_eq!(did_you_mean("x", keys), None);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
    }
}
