//! A bounded parallel map, for independent slow requests (a walk of a server's listings, the
//! presence checks of remote chunks): at most `limit` run at once, results come back in order,
//! and the first failure stops the items not started yet.

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
}
