//! trawl's integration tests: one binary, one module per area.

mod chaos;
mod cli;
mod client;
mod conformance;
mod crawling;
mod delivering;
mod end_to_end;
mod errors;
mod events;
mod fetching;
mod freshness;
mod frontier;
mod generations;
mod items;
mod links;
mod migration;
mod operator;
mod proxy;
mod refusals;
mod run_limits;
mod seeding;
mod site;
mod ssm;
mod stack;
mod support;
mod sweeping;
