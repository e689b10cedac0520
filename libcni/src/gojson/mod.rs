//! JSON the way Go's `encoding/json` reads ([`from_slice`]) and writes it ([`encode`]).
//! Configs and runtime-sent JSON that the Go plugins and Go libcni accept must work with
//! ours, and the same mistakes must fail. Reading follows Go's rules:
//! - a struct field takes the key of its exact name, else a key equal to it
//!   case-insensitively (`"Subnet"` fills `subnet`); map keys stay as written;
//! - a repeated key: the last one wins;
//! - `null` leaves a struct field at its default (and is the zero value elsewhere);
//! - documents nest up to Go's limit of 10,000 levels, decoded without overflowing the stack.
//!
//! Every place that decodes config, stdin, a result or a cache file goes through
//! [`from_slice`]; errors name the offending field (`args.cni.mac: invalid type: ...`).

mod decode;
pub mod encode;

pub use decode::{
    Error, MAX_DEPTH, eq_fold, field, from_slice, from_value, last_field_is_null, map_field,
    pick_keys, with_document,
};
