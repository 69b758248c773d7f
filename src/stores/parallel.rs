//! Parallel maps whose results come back in the items' order.
//!
//! [`map`] is for independent slow requests (a walk of a server's listings, the presence checks
//! of remote chunks): at most `limit` run at once, and the first failure stops the items not
//! started yet. [`map_slices`] is for CPU work on many small items (the per-array documents a
//! mount parses): the items are cut into one contiguous slice per thread, each thread maps its
//! slice, and the slices are joined in order, so the result is the sequential one.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::lock;

/// `f` of every item, in order, at most `limit` at once (one item: on this thread); the first
/// failure stops the items not yet started and is the result.
pub fn map<T: Sync, R: Send, E: Send>(
    items: &[T],
    limit: usize,
    f: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E> {
    if items.len() <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<E>> = Mutex::new(None);
    let failed = AtomicBool::new(false);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..limit.clamp(1, items.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let (Some(item), Some(slot)) = (items.get(i), slots.get(i)) else {
                    break;
                };
                if failed.load(Ordering::Relaxed) {
                    break;
                }
                match f(item) {
                    Ok(value) => *lock(slot) = Some(value),
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        lock(&failure).get_or_insert(e);
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    // Without a failure every item ran (a panic in `f` ends the scope with that panic).
    Ok(slots
        .into_iter()
        .filter_map(|slot| slot.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect())
}

/// How a CPU-bound map is split: at most `threads` threads, each with at least `min_per_thread`
/// items (fewer items run on the calling thread alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// Most threads used (the calling thread included).
    pub threads: usize,
    /// Fewest items worth a thread of their own.
    pub min_per_thread: usize,
}

impl Split {
    /// One thread: the sequential map.
    pub const SEQUENTIAL: Split = Split {
        threads: 1,
        min_per_thread: 1,
    };

    /// One thread per core (`available_parallelism`), for slices of at least `min_per_thread`.
    pub fn per_core(min_per_thread: usize) -> Split {
        Split {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            min_per_thread,
        }
    }

    /// How many threads `len` items get.
    fn threads_for(self, len: usize) -> usize {
        (len / self.min_per_thread.max(1)).clamp(1, self.threads.max(1))
    }
}

/// `f` of every item, in the items' order, computed on up to `split.threads` threads, each
/// mapping one contiguous slice (the calling thread maps the first). A thread that cannot be
/// started leaves its slice to the calling thread; a panic in `f` is resumed here.
pub fn map_slices<T: Sync, R: Send>(
    items: &[T],
    split: Split,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    map_slices_with(items, split, || (), |(), item| f(item))
}

/// [`map_slices`] where each slice is mapped with a state of its own, made by `init` (a cache
/// of what the slice's items have in common).
pub fn map_slices_with<T: Sync, R: Send, S>(
    items: &[T],
    split: Split,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &T) -> R + Sync,
) -> Vec<R> {
    let threads = split.threads_for(items.len());
    let (init, f) = (&init, &f);
    let map = move |slice: &[T]| {
        let mut state = init();
        slice
            .iter()
            .map(|item| f(&mut state, item))
            .collect::<Vec<R>>()
    };
    if threads <= 1 {
        return map(items);
    }
    let per = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut slices = items.chunks(per);
        let first = slices.next().unwrap_or(&[]);
        let started: Vec<_> = slices
            .map(|slice| {
                let spawned = std::thread::Builder::new()
                    .name("daf-read".into())
                    .spawn_scoped(scope, move || map(slice));
                (slice, spawned.ok())
            })
            .collect();
        let mut out = map(first);
        out.reserve(items.len() - out.len());
        for (slice, handle) in started {
            match handle.map(|h| h.join()) {
                Some(Ok(part)) => out.extend(part),
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => out.extend(map(slice)),
            }
        }
        out
    })
}

/// Sorts stably by `order` each of up to `split.threads` contiguous slices of `items`, on a
/// thread of its own (a thread that cannot be started leaves its slice as it was): a stable sort
/// of the whole then finds the slices as runs and merges them (the result is the sequential
/// sort's).
pub fn sort_slices<T: Send>(
    items: &mut [T],
    split: Split,
    order: impl Fn(&T, &T) -> std::cmp::Ordering + Sync,
) {
    let threads = split.threads_for(items.len());
    if threads > 1 {
        let per = items.len().div_ceil(threads);
        let order = &order;
        std::thread::scope(|scope| {
            let mut slices = items.chunks_mut(per);
            let first = slices.next();
            for slice in slices {
                let _ = std::thread::Builder::new()
                    .name("daf-sort".into())
                    .spawn_scoped(scope, move || slice.sort_by(order));
            }
            if let Some(first) = first {
                first.sort_by(order);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_their_order_and_the_first_error_wins() {
        let items: Vec<usize> = (0..100).collect();
        let values = map(&items, 16, |&i| Ok::<_, String>(i * 2)).unwrap();
        assert_eq!(values, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        let err = map(&items, 16, |&i| if i == 50 { Err("boom") } else { Ok(i) }).unwrap_err();
        assert_eq!(err, "boom");
    }

    #[test]
    fn map_slices_gives_the_sequential_result_in_order() {
        let items: Vec<usize> = (0..1001).collect();
        let sequential: Vec<usize> = items.iter().map(|i| i * 3).collect();
        for threads in [1, 2, 3, 7, 2000] {
            let split = Split {
                threads,
                min_per_thread: 1,
            };
            assert_eq!(
                map_slices(&items, split, |i| i * 3),
                sequential,
                "{threads}"
            );
        }
        let none: Vec<usize> = Vec::new();
        assert!(map_slices(&none, Split::per_core(1), |i| *i).is_empty());
    }

    #[test]
    fn slices_sorted_apart_then_merged_are_the_stable_sequential_sort() {
        // Pairs equal by their first number keep their order (their second one).
        let items: Vec<(u32, u32)> = (0..10_001).map(|i| ((i * 7919) % 101, i)).collect();
        let mut sequential = items.clone();
        sequential.sort_by_key(|p| p.0);
        for threads in [1, 2, 3, 8] {
            let split = Split {
                threads,
                min_per_thread: 1000,
            };
            let mut sorted = items.clone();
            sort_slices(&mut sorted, split, |a, b| a.0.cmp(&b.0));
            let slices = split.threads_for(items.len());
            if slices > 1 {
                let per = items.len().div_ceil(slices);
                assert!(sorted.chunks(per).all(|c| c.is_sorted_by_key(|p| p.0)));
            } else {
                assert_eq!(sorted, items, "one slice is left to the whole sort");
            }
            sorted.sort_by_key(|p| p.0);
            assert_eq!(sorted, sequential, "{threads}");
        }
    }

    #[test]
    fn small_inputs_stay_on_the_calling_thread() {
        let split = Split {
            threads: 8,
            min_per_thread: 100,
        };
        assert_eq!(split.threads_for(99), 1);
        assert_eq!(split.threads_for(250), 2);
        assert_eq!(split.threads_for(100_000), 8);
        let me = std::thread::current().id();
        let ids = map_slices(&[0; 99], split, |_| std::thread::current().id());
        assert!(ids.iter().all(|id| *id == me));
        let ids = map_slices(&[0; 1000], split, |_| std::thread::current().id());
        assert!(ids.iter().any(|id| *id != me));
    }
}
