//! trawl's integration tests: one binary, one module per area.

mod fetching;
mod site;
