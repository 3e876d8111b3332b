//! The outbound signer: calls and replies leaving this host for the same peer host at the same
//! moment are signed together, with one signature over their batch's Merkle root
//! (`consort_net::sign_batch`), each keeping its own inclusion proof.
//!
//! There is no timer and no signing task. Each peer host has a queue; the first item to find
//! no signer at work becomes the signer: it steps aside once (`yield_now`, so that tasks
//! already runnable on this runtime, such as other calls woken by the same burst of link
//! answers, can queue theirs), then signs everything queued, its own item included, and hands
//! each item back. Items queued while it signed are signed next by one of their own tasks,
//! which the signer hands the turn to. So no item waits for more than the batch being signed
//! when it arrived and its own; a lone call waits for nothing but the one step aside. A batch
//! never mixes peer hosts: a proof shows its receiver the hashes of the other leaves, and those
//! must be of what that receiver is sent anyway.
//!
//! It signs only what [`LinkRemote`](super::LinkRemote) hands it (hops this host serves,
//! replies of its own agents); it never decides whether anything may leave, and it never
//! drops an item: a task that stops waiting (its call was dropped) loses only its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use consort_net::{CallEnvelope, HostKey, Outgoing, ReplyEnvelope};

use super::FleetMap;

/// What is signed: a call (its pending hops this host serves) or a reply.
#[derive(Debug)]
pub(super) enum Unsigned {
    Call(CallEnvelope),
    /// Boxed: a reply is several times a call's size on the stack.
    Reply(Box<ReplyEnvelope>),
}

/// How a waiting item's turn comes: signed, or handed back for its task to sign the queue.
enum Turn {
    Signed(Unsigned),
    Lead(Unsigned),
}

struct Job {
    item: Unsigned,
    turn: oneshot::Sender<Turn>,
}

/// One peer host's queue.
#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    /// Whether a task is signing (or about to sign) this queue.
    signing: bool,
}

/// Signs what leaves this host, batching per peer host.
pub(super) struct Signer {
    map: Arc<FleetMap>,
    key: HostKey,
    queues: Mutex<HashMap<String, Arc<Mutex<Queue>>>>,
    signatures: AtomicU64,
    leaves: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent; a panic elsewhere must not stop
    // every later call to that host.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Signer {
    pub(super) fn new(map: Arc<FleetMap>, key: HostKey) -> Self {
        Self {
            map,
            key,
            queues: Mutex::new(HashMap::new()),
            signatures: AtomicU64::new(0),
            leaves: AtomicU64::new(0),
        }
    }

    /// Signatures made and hops or replies signed, since this signer was made.
    pub(super) fn counts(&self) -> (u64, u64) {
        (
            self.signatures.load(Ordering::Relaxed),
            self.leaves.load(Ordering::Relaxed),
        )
    }

    /// `item`, signed in a batch with whatever else leaves for `peer` at the same moment.
    /// `None` only if the task signing its batch stopped before handing it back, which cannot
    /// happen (nothing awaits between taking the queue and handing the items back); the caller
    /// reports it as a failure to send.
    pub(super) async fn sign(&self, peer: &str, item: Unsigned) -> Option<Unsigned> {
        let queue = {
            let mut queues = lock(&self.queues);
            match queues.get(peer) {
                Some(queue) => queue.clone(),
                None => queues.entry(peer.to_owned()).or_default().clone(),
            }
        };
        let waiting = {
            let mut state = lock(&queue);
            if state.signing {
                let (turn, waiting) = oneshot::channel();
                state.jobs.push(Job { item, turn });
                Err(waiting)
            } else {
                state.signing = true;
                Ok(item)
            }
        };
        let mine = match waiting {
            Ok(item) => item,
            Err(waiting) => match waiting.await {
                Ok(Turn::Signed(item)) => return Some(item),
                Ok(Turn::Lead(item)) => item,
                Err(_) => return None,
            },
        };
        self.lead(Lead {
            queue,
            mine: Some(mine),
        })
        .await
    }

    /// Signs the queue as its signer; returns this task's own item, signed.
    async fn lead(&self, mut lead: Lead) -> Option<Unsigned> {
        // Tasks that are runnable now queue their items before the batch is taken.
        tokio::task::yield_now().await;
        let jobs = std::mem::take(&mut lock(&lead.queue).jobs);
        let mut items: Vec<Unsigned> = Vec::with_capacity(jobs.len() + 1);
        let mut turns: Vec<oneshot::Sender<Turn>> = Vec::with_capacity(jobs.len());
        // From here to the hand-over nothing awaits, so no queued item can be lost to a task
        // that stops waiting.
        items.extend(lead.mine.take());
        for job in jobs {
            items.push(job.item);
            turns.push(job.turn);
        }
        let map = &self.map;
        let signed = {
            let mut outgoing: Vec<Outgoing<'_>> = items
                .iter_mut()
                .map(|item| match item {
                    Unsigned::Call(envelope) => Outgoing::Call(envelope),
                    Unsigned::Reply(reply) => Outgoing::Reply(reply.as_mut()),
                })
                .collect();
            consort_net::sign_batch(&mut outgoing, &map.host, &self.key, |agent| {
                map.is_local(agent)
            })
        };
        self.signatures
            .fetch_add(signed.signatures as u64, Ordering::Relaxed);
        self.leaves
            .fetch_add(signed.leaves as u64, Ordering::Relaxed);
        let mut items = items.into_iter();
        let own = items.next();
        for (item, turn) in items.zip(turns) {
            // A task that stopped waiting has dropped its call; its item goes with it.
            let _ = turn.send(Turn::Signed(item));
        }
        // Hands the turn on (see `Lead`'s drop).
        drop(lead);
        own
    }
}

/// The turn to sign one peer's queue. Dropped (when done, or when its task stops waiting), it
/// hands the turn to the next queued item's task, or marks the queue idle.
struct Lead {
    queue: Arc<Mutex<Queue>>,
    /// This task's own item until it is signed. Dropped with a task that stopped waiting.
    mine: Option<Unsigned>,
}

impl Drop for Lead {
    fn drop(&mut self) {
        let mut state = lock(&self.queue);
        while !state.jobs.is_empty() {
            let job = state.jobs.remove(0);
            if job.turn.send(Turn::Lead(job.item)).is_ok() {
                return;
            }
            // That task stopped waiting: its item goes with it; try the next.
        }
        state.signing = false;
    }
}
