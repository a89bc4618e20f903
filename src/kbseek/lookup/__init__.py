"""The agent tool ``lookup_knowledge``: its request and response types, the tool that turns a recall into
levelled, grouped, deduplicated evidence, the invocation records it writes, its function-calling schema and the
renderings an agent or a person reads."""
