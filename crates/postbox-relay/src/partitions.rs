//! Partition ownership arithmetic: how many partitions each relay worker aims to hold.

/// Partitions one worker should own when `members` workers share `partitions`.
/// Rounded up, so the shares always cover every partition.
pub fn target_share(partitions: usize, members: usize) -> usize {
    partitions.div_ceil(members.max(1))
}

/// The order in which worker `seed` tries free partitions: a rotation, so
/// workers starting together do not all race for partition 0.
pub(crate) fn candidates(partitions: usize, seed: usize, owned: &[i16]) -> Vec<i32> {
    (0..partitions)
        .map(|i| ((i + seed) % partitions) as i32)
        .filter(|p| !owned.contains(&(*p as i16)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_everything() {
        for members in 1..=70 {
            assert!(target_share(64, members) * members >= 64);
        }
        assert_eq!(target_share(64, 0), 64);
        assert_eq!(target_share(64, 3), 22);
    }

    #[test]
    fn candidates_rotate_and_skip_owned() {
        assert_eq!(candidates(4, 1, &[2]), vec![1, 3, 0]);
    }
}
