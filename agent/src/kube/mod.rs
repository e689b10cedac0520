//! Kubernetes objects in: the API client, the collections it lists and watches, the list
//! + watch of every Node into a shared cache, and what is kept of a Node.

pub mod api;
pub mod collection;
pub mod nodes;
pub(crate) mod page;
pub(crate) mod parse;
pub(crate) mod podcidr;
pub mod watcher;
