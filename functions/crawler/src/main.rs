//! The crawler Lambda (wiring only; the logic is in trawl-core).

fn main() {}
