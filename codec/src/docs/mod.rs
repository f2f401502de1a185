//! Guides that belong with the API: how to describe a message type of your own.

pub mod attributes;
