//! Keeping the daemon's flows in step with the kernel's: ring-buffer records
//! can be lost (the buffer was full), and a lost create leaves a flow in the
//! fallback forever, a lost release leaks its libccp slot. The BPF `flows`
//! map lists every live flow, so comparing it with the flows the daemon knows
//! finds both. A difference counts only when two passes in a row see it: a
//! record may still be on its way through the ring buffer.

use std::collections::HashSet;

/// What one pass decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resync {
    /// Live in the kernel, unknown here twice in a row: their create was lost.
    pub lost_creates: Vec<u32>,
    /// Known here, gone from the kernel twice in a row: their release was lost.
    pub lost_releases: Vec<u32>,
}

/// The two-pass comparison; holds what the last pass suspected.
#[derive(Debug, Default)]
pub struct FlowResync {
    suspect_unknown: HashSet<u32>,
    suspect_gone: HashSet<u32>,
}

impl FlowResync {
    /// Compare the flows the daemon `known`s with the kernel's `live` ones.
    pub fn pass(&mut self, known: &HashSet<u32>, live: &HashSet<u32>) -> Resync {
        let unknown: HashSet<u32> = live.difference(known).copied().collect();
        let gone: HashSet<u32> = known.difference(live).copied().collect();
        let mut r = Resync {
            lost_creates: unknown.intersection(&self.suspect_unknown).copied().collect(),
            lost_releases: gone.intersection(&self.suspect_gone).copied().collect(),
        };
        r.lost_creates.sort_unstable();
        r.lost_releases.sort_unstable();
        self.suspect_unknown = unknown.difference(&r.lost_creates.iter().copied().collect()).copied().collect();
        self.suspect_gone = gone.difference(&r.lost_releases.iter().copied().collect()).copied().collect();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> HashSet<u32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_record_in_flight_is_not_a_lost_record() {
        let mut r = FlowResync::default();
        // flow 2 created in the kernel, its record not consumed yet
        assert_eq!(r.pass(&set(&[1]), &set(&[1, 2])), Resync::default());
        // the record arrived before the next pass
        assert_eq!(r.pass(&set(&[1, 2]), &set(&[1, 2])), Resync::default());
    }

    #[test]
    fn lost_create_and_release_are_found_on_the_second_pass_once() {
        let mut r = FlowResync::default();
        assert_eq!(r.pass(&set(&[1, 3]), &set(&[1, 2])), Resync::default());
        let found = r.pass(&set(&[1, 3]), &set(&[1, 2]));
        assert_eq!(found, Resync { lost_creates: vec![2], lost_releases: vec![3] });
        // acted on: the daemon now knows 2 and forgot 3
        assert_eq!(r.pass(&set(&[1, 2]), &set(&[1, 2])), Resync::default());
    }
}
