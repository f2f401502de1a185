//! Example code for pgoutput-codec, shared by the example programs and the tests.

pub mod extension;
