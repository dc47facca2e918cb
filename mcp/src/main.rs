//! `cairn-mcp`: the MCP server of a cairn cluster (SPEC §9).
fn main() {}
