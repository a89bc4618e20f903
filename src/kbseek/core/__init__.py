"""Pure core: stdlib and small pure dependencies only; no database, vector store or web framework."""
