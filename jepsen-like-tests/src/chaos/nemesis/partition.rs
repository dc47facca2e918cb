//! Which links each network fault cuts, as sets of node pairs (pure: unit-tested).
//!
//! - halves: a random minority against the majority.
//! - isolate: one node (the leader) against everyone else.
//! - bridge: two sides that cannot see each other, and one node that sees both.
//! - ring: every node sees only its two neighbours on a random ring. With 3 or fewer
//!   nodes every pair are neighbours, so a ring cuts one random link instead (a partial
//!   partition, the closest non-trivial shape).
//! - lossy: links that drop each packet with a probability (not a clean cut).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::chaos::net::Cut;

/// Symmetric full cuts between every node of `a` and every node of `b`.
pub fn between(a: &[u64], b: &[u64]) -> Vec<Cut> {
    let mut cuts = Vec::new();
    for &x in a {
        for &y in b {
            if x != y {
                cuts.push(Cut {
                    from: x,
                    to: y,
                    probability_pct: None,
                });
                cuts.push(Cut {
                    from: y,
                    to: x,
                    probability_pct: None,
                });
            }
        }
    }
    cuts
}

/// A random minority (at least one node) against the rest. Returns (minority, majority).
pub fn halves(nodes: &[u64], rng: &mut StdRng) -> (Vec<u64>, Vec<u64>) {
    let mut shuffled = nodes.to_vec();
    shuffled.shuffle(rng);
    let minority = ((nodes.len() - 1) / 2).max(1);
    let (a, b) = shuffled.split_at(minority);
    (a.to_vec(), b.to_vec())
}

pub fn isolate(node: u64, nodes: &[u64]) -> Vec<Cut> {
    let others: Vec<u64> = nodes.iter().copied().filter(|n| *n != node).collect();
    between(&[node], &others)
}

/// Returns (cuts, bridge node).
pub fn bridge(nodes: &[u64], rng: &mut StdRng) -> (Vec<Cut>, u64) {
    let mut shuffled = nodes.to_vec();
    shuffled.shuffle(rng);
    let bridge = shuffled[0];
    let rest = &shuffled[1..];
    let (a, b) = rest.split_at(rest.len() / 2);
    (between(a, b), bridge)
}

/// Returns (cuts, ring order).
pub fn ring(nodes: &[u64], rng: &mut StdRng) -> (Vec<Cut>, Vec<u64>) {
    let mut order = nodes.to_vec();
    order.shuffle(rng);
    let n = order.len();
    if n <= 3 {
        return (between(&order[..1], &order[1..2]), order);
    }
    let mut cuts = Vec::new();
    for i in 0..n {
        for j in (i + 1)..n {
            let neighbours = j == i + 1 || (i == 0 && j == n - 1);
            if !neighbours {
                cuts.extend(between(&[order[i]], &[order[j]]));
            }
        }
    }
    (cuts, order)
}

/// Both directions of every link between `a` and `b`, each packet dropped with `pct`%.
pub fn lossy(a: &[u64], b: &[u64], pct: u8) -> Vec<Cut> {
    between(a, b)
        .into_iter()
        .map(|c| Cut {
            probability_pct: Some(pct),
            ..c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn connected(cuts: &[Cut], a: u64, b: u64) -> bool {
        !cuts
            .iter()
            .any(|c| (c.from, c.to) == (a, b) || (c.from, c.to) == (b, a))
    }

    #[test]
    fn halves_leave_a_strict_majority() {
        let mut rng = StdRng::seed_from_u64(1);
        for n in [3u64, 5] {
            let nodes: Vec<u64> = (1..=n).collect();
            let (minority, majority) = halves(&nodes, &mut rng);
            assert!(majority.len() as u64 > n / 2 && !minority.is_empty());
            let cuts = between(&minority, &majority);
            assert!(majority
                .iter()
                .all(|a| majority.iter().all(|b| connected(&cuts, *a, *b))));
        }
    }

    #[test]
    fn bridge_sees_both_sides_and_sides_do_not_see_each_other() {
        let nodes: Vec<u64> = (1..=5).collect();
        let (cuts, b) = bridge(&nodes, &mut StdRng::seed_from_u64(7));
        for n in &nodes {
            assert!(connected(&cuts, b, *n));
        }
        assert_eq!(cuts.len(), 2 * 2 * 2);
    }

    #[test]
    fn ring_keeps_exactly_two_neighbours() {
        let nodes: Vec<u64> = (1..=5).collect();
        let (cuts, _) = ring(&nodes, &mut StdRng::seed_from_u64(3));
        for a in &nodes {
            let seen = nodes
                .iter()
                .filter(|b| *b != a && connected(&cuts, *a, **b))
                .count();
            assert_eq!(seen, 2);
        }
        let three: Vec<u64> = (1..=3).collect();
        assert_eq!(ring(&three, &mut StdRng::seed_from_u64(3)).0.len(), 2);
    }
}
