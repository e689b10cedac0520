//! What the client counts for `/metrics`: requests by kind and outcome, connections.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a request was: the kinds of `cni_rs_api_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Get,
    List,
    Watch,
}

/// How it ended: answered 200, 410 Gone, or anything else (status or transport).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Gone,
    Error,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Get, Kind::List, Kind::Watch];
    pub fn name(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::List => "list",
            Kind::Watch => "watch",
        }
    }
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Ok, Outcome::Gone, Outcome::Error];
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Gone => "gone",
            Outcome::Error => "error",
        }
    }
}

/// Requests made (one per list page) by kind and outcome, and TCP connections opened.
#[derive(Debug, Default)]
pub struct Requests {
    counts: [[AtomicU64; 3]; 3],
    connections: AtomicU64,
}

impl Requests {
    pub(super) fn add(&self, kind: Kind, outcome: Outcome) {
        self.counts[kind as usize][outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self, kind: Kind, outcome: Outcome) -> u64 {
        self.counts[kind as usize][outcome as usize].load(Ordering::Relaxed)
    }

    pub(super) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}
